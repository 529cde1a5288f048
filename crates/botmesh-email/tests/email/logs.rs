//! What the tests' providers log: one `tracing` subscriber for the whole test binary, installed
//! by the first test that asks, keeping each warning as a line of text.

use std::io::Write;
use std::sync::{Mutex, Once, PoisonError};

static LINES: Mutex<Vec<u8>> = Mutex::new(Vec::new());

/// Writes into [`LINES`].
struct Capture;

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LINES.lock().unwrap_or_else(PoisonError::into_inner).extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Starts keeping the warnings logged from now on, by every test of the binary.
pub(crate) fn capture() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(|| Capture)
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
}

/// The warnings kept so far that name provider `id`.
pub(crate) fn warnings_of(id: &str) -> Vec<String> {
    let text =
        String::from_utf8_lossy(&LINES.lock().unwrap_or_else(PoisonError::into_inner)).into_owned();
    let name = format!("provider=\"{id}\"");
    text.lines().filter(|l| l.contains(&name)).map(str::to_owned).collect()
}
