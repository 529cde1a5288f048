//! The futures of user code (handlers, hooks, steps, jobs) as the bot keeps them: their
//! errors boxed, without the `async` block that would hold each future twice (as its
//! capture and as what it awaits).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use botmesh_traits::BoxError;

pin_project_lite::pin_project! {
    /// A future whose error is boxed (see [`errors_boxed`]).
    pub(crate) struct ErrorsBoxed<F> {
        #[pin]
        future: F,
    }
}

/// `future`, its error turned into a [`BoxError`].
pub(crate) fn errors_boxed<F>(future: F) -> ErrorsBoxed<F> {
    ErrorsBoxed { future }
}

impl<F, T, E> Future for ErrorsBoxed<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().future.poll(cx).map_err(Into::into)
    }
}
