//! The HTTP client the platform stand-ins call bots with.

/// A client builder for plain HTTP to loopback. Another crate of the same build (a provider on
/// rustls) may turn reqwest's rustls on, and then a client can only be built once rustls has a
/// crypto provider: ring is chosen here unless one was installed already.
pub(crate) fn client_builder() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}

/// A client with the defaults; see [`client_builder`].
#[cfg(test)]
pub(crate) fn client() -> reqwest::Client {
    client_builder().build().unwrap_or_else(|e| panic!("a test HTTP client: {e}"))
}
