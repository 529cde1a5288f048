//! The worker's lingering, and what a message's job holds.

use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::Inbound;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Span;

use super::{Idle, LINGER, Worker};
use crate::Message;
use crate::dispatcher::job::{Job, Timer, Work};

fn job(serial: u64) -> Box<Job> {
    Box::new(Job::timer(serial, 0, Timer::Timeout))
}

/// The serial of the timer job a wait ended with, if it ended with one.
fn serial(got: Result<Option<Box<Job>>, Idle>) -> Option<u64> {
    match got.ok()??.work {
        Work::Timer { serial, .. } => Some(serial),
        _ => None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_worker_lingers_a_full_linger_after_its_last_job_whatever_its_timer_s_age() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut timer = std::pin::pin!(tokio::time::sleep(LINGER));
    // Jobs keep coming for most of a linger: each wait ends with its job.
    for n in 0..4 {
        tx.send(job(n)).unwrap();
        assert_eq!(serial(Worker::linger(&mut rx, timer.as_mut()).await), Some(n));
        tokio::time::advance(LINGER / 5).await;
    }
    // The timer, set when the worker started, fires a fifth of a linger into this wait; the
    // worker waits on, until a full linger after its last job.
    let waited = Instant::now();
    assert!(Worker::linger(&mut rx, timer.as_mut()).await.is_err(), "no job came");
    assert_eq!(waited.elapsed(), LINGER);
    // A job that comes during a wait ends it.
    let sender = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        tx.send(job(9)).unwrap();
    });
    assert_eq!(serial(Worker::linger(&mut rx, timer.as_mut()).await), Some(9));
    sender.await.unwrap();
}

/// The size of what `f` returns, without calling it.
fn size_of_return<A, R>(_: impl FnOnce(&'static mut Worker, A) -> R) -> usize {
    size_of::<R>()
}

/// The most a job's future may weigh: it is boxed for every message. When each layer a
/// message goes through kept its own copy of it, or two, the future weighed 7,552 bytes.
const MOST: usize = 6_000;

#[test]
fn a_message_s_job_holds_it_once_per_layer() {
    let job = size_of_return(|w, (job, span): (Box<Job>, &'static Span)| w.run_job_in(job, span));
    assert!(job <= MOST, "a job's future weighs {job} bytes");
    // Under the hooks, the layers share the message instead of each holding a copy.
    let route = size_of_return(|w, msg: Arc<Message>| w.route(msg));
    assert!(route < size_of::<Message>(), "routing's future weighs {route} bytes");
    // A layer that passes the work on holds it once beside the next layer's future.
    let work = size_of_return(|w, (work, changed): (Work, bool)| w.work(work, changed));
    let on_message = size_of_return(|w, (m, changed): (Inbound, bool)| w.on_message(m, changed));
    assert!(
        work < on_message + 2 * size_of::<Work>(),
        "the work's future weighs {work} bytes over a message's {on_message}"
    );
}
