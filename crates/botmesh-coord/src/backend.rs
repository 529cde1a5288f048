//! The handle through which the runtime calls a coordination backend.

use std::ops::Deref;
use std::sync::Arc;

use botmesh_core::traits::Coordinator;

/// A shared coordination backend, called through its trait object.
///
/// An `Arc<dyn Coordinator>` is a coordinator itself (the forwarding impl that lets a user
/// hand the runtime a clone of their own `Arc`), and a method called on one picks that impl:
/// the call's future is boxed once by the forwarding and once more by the backend. Calls
/// through this handle dereference to the trait object first, so each is the backend's own
/// future alone. The runtime's timing layer (`Metered`) calls the backend through one.
pub(crate) struct Backend(Arc<dyn Coordinator>);

impl Backend {
    /// Calls `coordinator` through its trait object.
    pub(crate) fn new(coordinator: Arc<dyn Coordinator>) -> Self {
        Self(coordinator)
    }
}

impl Deref for Backend {
    type Target = dyn Coordinator;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}
