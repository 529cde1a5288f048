//! The chaos harness of botmesh: several replica processes of one bot on a private
//! `redis-server`, a load generator that spreads each chat's numbered messages over them like a
//! load balancer, faults injected while it runs, and a checker over the recorded history.
//!
//! This library holds what the harness (`botmesh-chaos`) and the replica binary
//! (`chaos-replica`) share: the wire format between them, the records each side writes, and the
//! clock both read.

pub mod check;
pub mod record;
