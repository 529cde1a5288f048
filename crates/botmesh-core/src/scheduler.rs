//! Scheduled jobs: plain ones that run on every replica, and durable tasks whose every
//! occurrence runs on exactly one replica.
//!
//! A durable task is identified by its id. At each occurrence the replica that leads
//! `task:<id>` claims the occurrence in the store
//! ([`TaskStore::task_claim`](botmesh_traits::TaskStore::task_claim), one atomic write on the
//! task's own record) and runs the job only if the claim landed, so an occurrence runs
//! once even while leadership moves. Occurrences are numbered from the wall clock (for
//! [`Timing::every`], the interval count since the Unix epoch), so every replica agrees on
//! them.

use std::future::Future;
use std::panic::AssertUnwindSafe;
#[cfg(feature = "cron")]
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use botmesh_traits::{BoxError, CasOutcome, CheckpointRecord, CheckpointWrite, Error, Store};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tokio::time::Instant;

use crate::boxing::errors_boxed;
use crate::coordination::Coordination;
use crate::dispatcher::panic_message;
use crate::{Bot, BotError, Event, telemetry};

/// When a job runs.
///
/// In a configuration file (`serde` feature), one of `{ every = "5m" }`,
/// `{ cron = "0 */5 * * * *" }` or `{ at = "2030-01-01T09:00:00Z" }` (RFC 3339, UTC).
///
/// ```
/// use std::time::Duration;
///
/// use botmesh_core::{Bot, BotError, Outbound, Timing};
/// # use botmesh_testing::TestProvider;
///
/// # fn main() -> Result<(), botmesh_core::ConfigError> {
/// # let provider = TestProvider::new();
/// let bot = Bot::builder()
///     .provider(provider)
///     .every(Duration::from_secs(60), |job| async move {
///         tracing::debug!(occurrence = job.occurrence(), "tick");
///         Ok::<_, BotError>(())
///     })
///     .schedule(Timing::cron("0 0 9 * * Mon-Fri")?, |job| async move {
///         job.bot().send(&Outbound::text("ops-chat", "Good morning")).await?;
///         Ok::<_, BotError>(())
///     })
///     .build()?;
/// # let _ = bot;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize), serde(try_from = "TimingText"))]
pub struct Timing(Kind);

/// A [`Timing`] as a configuration file writes it.
#[cfg(feature = "serde")]
#[derive(serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum TimingText {
    Every(#[serde(with = "humantime_serde")] Duration),
    #[cfg(feature = "cron")]
    Cron(String),
    At(#[serde(with = "humantime_serde")] SystemTime),
}

#[cfg(feature = "serde")]
impl TryFrom<TimingText> for Timing {
    type Error = crate::ConfigError;

    fn try_from(text: TimingText) -> Result<Self, crate::ConfigError> {
        Ok(match text {
            TimingText::Every(interval) => Self::every(interval),
            #[cfg(feature = "cron")]
            TimingText::Cron(expression) => Self::cron(&expression)?,
            TimingText::At(when) => Self::at(when),
        })
    }
}

#[derive(Debug, Clone)]
enum Kind {
    Every(Duration),
    #[cfg(feature = "cron")]
    Cron(Box<cron::Schedule>),
    At(SystemTime),
}

impl Timing {
    /// Every `interval`, aligned on the Unix epoch (every 5 minutes means at :00, :05, ...).
    pub fn every(interval: Duration) -> Self {
        Self(Kind::Every(interval.max(Duration::from_millis(1))))
    }

    /// On a cron expression with seconds (`"0 */5 * * * *"`), in UTC. Feature `cron` (on by
    /// default).
    #[cfg(feature = "cron")]
    pub fn cron(expression: &str) -> Result<Self, crate::ConfigError> {
        cron::Schedule::from_str(expression).map(|s| Self(Kind::Cron(Box::new(s)))).map_err(|e| {
            crate::ConfigError::InvalidSchedule {
                expression: expression.to_owned(),
                reason: e.to_string(),
            }
        })
    }

    /// Once, at `when`.
    pub fn at(when: SystemTime) -> Self {
        Self(Kind::At(when))
    }

    /// The first occurrence after `now_ms`: its number and when it is due, in ms since the epoch.
    fn next_after(&self, now_ms: u64) -> Option<(u64, u64)> {
        match &self.0 {
            Kind::Every(d) => {
                let step = u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1);
                let k = now_ms / step + 1;
                Some((k, k.saturating_mul(step)))
            }
            #[cfg(feature = "cron")]
            Kind::Cron(schedule) => {
                let now = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(
                    i64::try_from(now_ms).ok()?,
                )?;
                let next = schedule.after(&now).next()?;
                let ms = u64::try_from(next.timestamp_millis()).ok()?;
                Some((ms, ms))
            }
            Kind::At(when) => {
                let ms = ms_since_epoch(*when);
                (ms > now_ms).then_some((ms, ms))
            }
        }
    }

    /// The latest occurrence at or before `now_ms`, for catching up after downtime.
    fn latest_before(&self, now_ms: u64) -> Option<u64> {
        match &self.0 {
            Kind::Every(d) => {
                let step = u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1);
                Some(now_ms / step)
            }
            // Catching up is only defined for intervals and one-off instants.
            #[cfg(feature = "cron")]
            Kind::Cron(_) => None,
            Kind::At(when) => {
                let ms = ms_since_epoch(*when);
                (ms <= now_ms).then_some(ms)
            }
        }
    }
}

fn ms_since_epoch(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What a durable task does about occurrences missed while no replica ran.
///
/// In a configuration file (`serde` feature): `"run-once"` or `"skip"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(rename_all = "kebab-case")
)]
#[non_exhaustive]
pub enum Missed {
    /// Run once on recovery for everything missed, then go on with the schedule.
    #[default]
    RunOnce,
    /// Skip what was missed.
    Skip,
}

/// Makes a job durable: identified by `id`, each occurrence runs on exactly one replica.
///
/// In a configuration file (`serde` feature): `{ id = "digest", missed = "skip" }`, `missed`
/// optional.
#[derive(Debug, Clone)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(deny_unknown_fields)
)]
#[non_exhaustive]
///
/// ```
/// use std::time::Duration;
///
/// use botmesh_core::{Bot, BotError, Missed, TaskOptions};
/// # use botmesh_testing::TestProvider;
///
/// # fn main() -> Result<(), botmesh_core::ConfigError> {
/// let digest = TaskOptions::durable("daily-digest").missed(Missed::Skip);
/// let bot = Bot::builder()
///     .provider(TestProvider::new())
///     .every_with(Duration::from_secs(24 * 3600), digest, |_job| async move {
///         Ok::<_, BotError>(())
///     })
///     .build()?;
/// # let _ = bot;
/// # Ok(()) }
/// ```
#[must_use = "options do nothing until given to a scheduled job"]
pub struct TaskOptions {
    /// The task's id, unique among the bot's durable tasks.
    pub id: String,
    /// What to do about missed occurrences.
    #[cfg_attr(feature = "serde", serde(default))]
    pub missed: Missed,
}

impl TaskOptions {
    /// A durable task with id `id`, running missed occurrences once on recovery.
    pub fn durable(id: impl Into<String>) -> Self {
        Self { id: id.into(), missed: Missed::RunOnce }
    }

    /// Sets the missed-occurrence policy.
    pub fn missed(mut self, missed: Missed) -> Self {
        self.missed = missed;
        self
    }
}

/// Where the scheduler's leadership of durable tasks comes from.
#[derive(Clone)]
#[non_exhaustive]
pub enum SchedulerLease {
    /// A coordination runtime's leaderships (the default with coordination: the bot's own).
    Coordination(Arc<dyn Coordination>),
    /// A store's leases (the default without coordination: the bot's store).
    Store(Arc<dyn Store>),
}

impl std::fmt::Debug for SchedulerLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Coordination(_) => "SchedulerLease::Coordination",
            Self::Store(_) => "SchedulerLease::Store",
        })
    }
}

/// What a job gets when it runs.
#[derive(Debug, Clone)]
pub struct JobCtx {
    bot: Bot,
    occurrence: u64,
}

impl JobCtx {
    /// The bot, to send messages or reach its store.
    pub fn bot(&self) -> &Bot {
        &self.bot
    }

    /// The occurrence's number: the interval count since the Unix epoch for
    /// [`Timing::every`], the due time in ms for cron and one-off jobs.
    pub fn occurrence(&self) -> u64 {
        self.occurrence
    }
}

pub(crate) type JobFn =
    Arc<dyn Fn(JobCtx) -> BoxFuture<'static, Result<(), BoxError>> + Send + Sync>;

/// A registered job.
#[derive(Clone)]
pub(crate) struct JobDef {
    pub(crate) timing: Timing,
    pub(crate) task: Option<TaskOptions>,
    pub(crate) f: JobFn,
}

pub(crate) fn job_fn<F, Fut, E>(f: F) -> JobFn
where
    F: Fn(JobCtx) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Into<BoxError>,
{
    Arc::new(move |ctx| {
        let fut = f(ctx);
        Box::pin(errors_boxed(fut))
    })
}

/// The scheduler's clock: wall-clock milliseconds that advance with tokio's clock, so tests
/// under paused time see occurrences come due without waiting.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    base_ms: u64,
    base: Instant,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Self { base_ms: ms_since_epoch(SystemTime::now()), base: Instant::now() }
    }

    fn now_ms(&self) -> u64 {
        self.base_ms + u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn instant_at(&self, ms: u64) -> Instant {
        self.base + Duration::from_millis(ms.saturating_sub(self.base_ms))
    }
}

/// How long a task's leadership lasts when it comes from store leases.
const STORE_LEASE: Duration = Duration::from_secs(15);

async fn run_job(bot: &Bot, def: &JobDef, occurrence: u64) {
    let ctx = JobCtx { bot: bot.clone(), occurrence };
    let outcome = AssertUnwindSafe((def.f)(ctx)).catch_unwind().await;
    let job = task_name(def);
    let ok = matches!(outcome, Ok(Ok(())));
    let outcome_label = if ok { "ok" } else { "error" };
    metrics::counter!(telemetry::SCHEDULER_RUNS, "job" => job.clone(), "outcome" => outcome_label)
        .increment(1);
    let error = match outcome {
        Ok(Ok(())) => return,
        Ok(Err(source)) => BotError::Job { task: job, source },
        Err(panic) => BotError::Job { task: job, source: panic_message(&*panic).into() },
    };
    bot.emit(Event::Error { key: None, message: None, error: Arc::new(error) });
}

fn task_name(def: &JobDef) -> String {
    def.task.as_ref().map_or_else(|| "job".to_owned(), |t| t.id.clone())
}

/// Runs a plain job on this replica at every occurrence.
pub(crate) async fn plain(bot: Bot, def: JobDef, clock: Clock) {
    while let Some((occurrence, due)) = def.timing.next_after(clock.now_ms()) {
        tokio::time::sleep_until(clock.instant_at(due)).await;
        run_job(&bot, &def, occurrence).await;
    }
}

/// Runs a durable task: each occurrence on the replica that leads it and claims it.
pub(crate) async fn durable(
    bot: Bot,
    def: JobDef,
    task: TaskOptions,
    lease: SchedulerLease,
    holder: String,
    clock: Clock,
) {
    let record = task.id.as_str();
    let lead = format!("task:{}", task.id);
    let store = Arc::clone(bot.store());
    // Catch up on what was missed while no replica ran.
    if let Some(latest) = def.timing.latest_before(clock.now_ms())
        && leads(&lease, &lead, &holder).await
    {
        match last_claimed(&*store, record).await {
            Ok(Some(last)) if last < latest => {
                metrics::counter!(telemetry::SCHEDULER_MISSES, "job" => task.id.clone())
                    .increment(1);
                if claim(&*store, record, latest).await.unwrap_or(false)
                    && task.missed == Missed::RunOnce
                {
                    run_job(&bot, &def, latest).await;
                }
            }
            Ok(_) => {}
            Err(e) => bot.emit(Event::Error { key: None, message: None, error: Arc::new(e) }),
        }
    }
    while let Some((occurrence, due)) = def.timing.next_after(clock.now_ms()) {
        tokio::time::sleep_until(clock.instant_at(due)).await;
        if !leads(&lease, &lead, &holder).await {
            continue;
        }
        match claim(&*store, record, occurrence).await {
            Ok(true) => run_job(&bot, &def, occurrence).await,
            Ok(false) => {}
            Err(e) => bot.emit(Event::Error { key: None, message: None, error: Arc::new(e) }),
        }
    }
}

/// Whether this replica leads task `name` now. A store of one process without leases has
/// nobody to share the task with: its only process leads.
async fn leads(lease: &SchedulerLease, name: &str, holder: &str) -> bool {
    match lease {
        SchedulerLease::Coordination(c) => matches!(c.lead(name, STORE_LEASE).await, Ok(true)),
        SchedulerLease::Store(s) => match s.leases() {
            Some(leases) => {
                matches!(leases.acquire_lease(name, holder, STORE_LEASE).await, Ok(Some(_)))
            }
            // Nobody to share the task with, or no way to share it.
            None => !s.shared(),
        },
    }
}

/// The checkpoint row that stands in for task `id`'s record in a store without task records
/// (a custom store without [`Store::tasks`]).
fn fallback_row(id: &str) -> String {
    format!("botmesh:task:{id}")
}

/// The last occurrence of task `id` claimed so far.
async fn last_claimed(store: &dyn Store, id: &str) -> Result<Option<u64>, BotError> {
    if let Some(tasks) = store.tasks() {
        return Ok(tasks.task_last(id).await?);
    }
    let record = fallback_row(id);
    match store.get_checkpoint(&record).await? {
        Some(row) => last_in(&record, &row),
        None => Ok(None),
    }
}

/// The last occurrence a fallback checkpoint row `record` holds (`{"last": occurrence}`).
fn last_in(record: &str, row: &CheckpointRecord) -> Result<Option<u64>, BotError> {
    let value: serde_json::Value = serde_json::from_str(&row.data)
        .map_err(|e| Error::corrupt(format!("task record {record}"), e))?;
    Ok(value["last"].as_u64())
}

/// Claims `occurrence` of task `id` unless it (or a later one) was claimed already; one
/// atomic write.
async fn claim(store: &dyn Store, id: &str, occurrence: u64) -> Result<bool, BotError> {
    if let Some(tasks) = store.tasks() {
        return Ok(tasks.task_claim(id, occurrence).await?);
    }
    let record = fallback_row(id);
    let write = CheckpointWrite::new(serde_json::json!({ "last": occurrence }).to_string());
    loop {
        let current = store.get_checkpoint(&record).await?;
        let last = match &current {
            Some(row) => last_in(&record, row)?,
            None => None,
        };
        if last.is_some_and(|l| l >= occurrence) {
            return Ok(false);
        }
        let Some(cas) = store.cas() else {
            // One process: nobody races the write.
            store.set_checkpoint(&record, &write).await?;
            return Ok(true);
        };
        // Refused: another replica wrote meanwhile, so look again.
        if let CasOutcome::Written { .. } =
            cas.set_checkpoint_if(&record, &write, current.map(|c| c.revision)).await?
        {
            return Ok(true);
        }
    }
}

#[cfg(all(test, feature = "serde", feature = "cron"))]
mod tests {
    use super::*;

    #[test]
    fn timings_and_task_options_from_a_config_file() {
        let every: Timing = serde_json::from_str(r#"{ "every": "5m" }"#).unwrap();
        assert_eq!(every.next_after(299_999), Some((1, 300_000)));
        let cron: Timing = serde_json::from_str(r#"{ "cron": "0 */5 * * * *" }"#).unwrap();
        assert_eq!(cron.next_after(0).map(|(_, due)| due), Some(300_000));
        let at: Timing = serde_json::from_str(r#"{ "at": "1970-01-01T00:00:10Z" }"#).unwrap();
        assert_eq!(at.next_after(0), Some((10_000, 10_000)));
        let task: TaskOptions = serde_json::from_str(r#"{ "id": "digest" }"#).unwrap();
        assert_eq!((task.id.as_str(), task.missed), ("digest", Missed::RunOnce));
        let task: TaskOptions =
            serde_json::from_str(r#"{ "id": "digest", "missed": "skip" }"#).unwrap();
        assert_eq!(task.missed, Missed::Skip);
    }

    #[test]
    fn bad_timings_and_unknown_keys_are_refused() {
        assert!(serde_json::from_str::<Timing>(r#"{ "every": 300 }"#).is_err());
        assert!(serde_json::from_str::<Timing>(r#"{ "cron": "every five minutes" }"#).is_err());
        assert!(serde_json::from_str::<Timing>(r#"{ "hourly": true }"#).is_err());
        assert!(serde_json::from_str::<TaskOptions>(r#"{ "id": "a", "mised": "skip" }"#).is_err());
        assert!(serde_json::from_str::<TaskOptions>(r#"{ "missed": "skip" }"#).is_err());
    }
}
