//! Helpers shared by the integration tests.

use std::sync::{Arc, Mutex};

use botmesh_core::{BotBuilder, BotError, Event};
use botmesh_testing::TestProvider;

/// Records every event a bot emits.
#[derive(Clone, Default)]
pub(crate) struct Recorder(Arc<Mutex<Vec<Event>>>);

impl Recorder {
    pub(crate) fn attach(&self, builder: BotBuilder) -> BotBuilder {
        let log = Arc::clone(&self.0);
        builder.on(move |e| log.lock().unwrap().push(e.clone()))
    }

    pub(crate) fn events(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }

    pub(crate) fn errors(&self) -> Vec<Arc<BotError>> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Error { error, .. } => Some(error),
                _ => None,
            })
            .collect()
    }
}

/// A builder on a fresh `TestProvider`, with a recorder attached.
pub(crate) fn builder() -> (BotBuilder, TestProvider, Recorder) {
    let provider = TestProvider::new();
    let rec = Recorder::default();
    let b = rec.attach(botmesh_core::Bot::builder().provider(provider.clone()));
    (b, provider, rec)
}
