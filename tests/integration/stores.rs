//! The store conformance suite against every store available here.

use std::sync::Arc;

use botmesh_core::MemoryStore;
use botmesh_testing::{claimed_capabilities, store_conformance};

#[tokio::test(start_paused = true)]
async fn memory_store_passes_the_store_conformance_suite() {
    let store = Arc::new(MemoryStore::new());
    assert_eq!(claimed_capabilities(&*store), ["cas", "locks", "leases", "tasks", "journal"]);
    store_conformance(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_passes_the_conformance_suite_with_writers_on_several_threads() {
    store_conformance(Arc::new(MemoryStore::new())).await;
}

mod without_compare_and_set {
    use std::sync::Arc;
    use std::time::Duration;

    use botmesh_coord::CoordinationConfig;
    use botmesh_core::traits::Store;
    use botmesh_core::{
        Bot, BotError, ConfigError, EndReason, Event, Flow, MemoryStore, Step, TaskOptions,
        Trigger, Warning,
    };
    use botmesh_testing::{
        FaultyCoordinator, MemoryCoordinationHub, MemoryCoordinator, TestProvider,
    };

    use crate::support::{PlainStore, Recorder};

    const LEASE: Duration = Duration::from_secs(1);

    fn coordinated(
        hub: &MemoryCoordinationHub,
        id: &str,
        store: Arc<dyn Store>,
    ) -> (botmesh_core::BotBuilder, TestProvider, Recorder, Arc<FaultyCoordinator>) {
        let provider = TestProvider::new();
        let rec = Recorder::default();
        let inner: Arc<dyn botmesh_core::traits::Coordinator> =
            Arc::new(MemoryCoordinator::new(hub.clone(), id).with_lease(LEASE));
        let coordinator = Arc::new(FaultyCoordinator::new(inner));
        let coordination = CoordinationConfig::new(coordinator.clone()).build();
        let b = rec
            .attach(Bot::builder().provider(provider.clone()))
            .store(store)
            .coordination(coordination);
        (b, provider, rec, coordinator)
    }

    fn warned(rec: &Recorder) -> bool {
        rec.events().iter().any(|e| matches!(e, Event::Warning(Warning::NoAtomicCheckpoints)))
    }

    #[tokio::test(start_paused = true)]
    async fn a_coordinated_bot_on_a_store_without_compare_and_set_warns_with_an_event_at_start() {
        let hub = MemoryCoordinationHub::new();
        let (b, _, rec, _) = coordinated(&hub, "a", Arc::new(PlainStore::shared()));
        b.build().unwrap().start().await.unwrap();
        assert!(warned(&rec), "{:?}", rec.events());
        // A store with compare-and-set, or no coordination at all, gives no warning.
        let (b, _, rec, _) = coordinated(&hub, "b", Arc::new(MemoryStore::new()));
        b.build().unwrap().start().await.unwrap();
        assert!(!warned(&rec));
        let rec = Recorder::default();
        let bot = rec
            .attach(Bot::builder().provider(TestProvider::new()))
            .store(Arc::new(PlainStore::shared()))
            .build()
            .unwrap();
        bot.start().await.unwrap();
        assert!(!warned(&rec));
    }

    #[tokio::test(start_paused = true)]
    async fn without_compare_and_set_the_local_fence_keeps_a_stalled_replica_from_writing() {
        let hub = MemoryCoordinationHub::new();
        let store: Arc<dyn Store> = Arc::new(PlainStore::shared());
        let flow = |work: Duration| {
            Flow::new("order")
                .trigger(Trigger::keyword("order"))
                .persistent()
                .ask(botmesh_core::Ask::new("size", "Size?"))
                .do_step("pack", move |c| async move {
                    c.sleep(work).await;
                    c.send("packed").await?;
                    Ok::<_, BotError>(Step::Next)
                })
                .ask(botmesh_core::Ask::new("gift", "Gift wrap?"))
        };
        let (b, pa, ra, ca) = coordinated(&hub, "a", store.clone());
        let a = b.flow(flow(LEASE * 3)).build().unwrap();
        a.start().await.unwrap();
        let (b, pb, _, _) = coordinated(&hub, "b", store.clone());
        let b = b.flow(flow(Duration::ZERO)).build().unwrap();
        b.start().await.unwrap();
        pa.say("c", "order");
        pa.settled(&a).await;
        pa.say("c", "M");
        tokio::time::sleep(Duration::from_millis(20)).await;
        ca.set_stalled(true);
        pb.say("c", "hello?");
        pb.wait_sent(2).await;
        assert_eq!(pb.texts_to("c"), ["packed", "Gift wrap?"], "b took over");
        let b_wrote = store.get_checkpoint("test:c").await.unwrap().unwrap();
        // a's step wakes up: the fence refuses its send and its next step's checkpoint.
        ca.set_stalled(false);
        pa.settled(&a).await;
        assert_eq!(pa.texts_to("c"), ["Size?"]);
        assert_eq!(store.get_checkpoint("test:c").await.unwrap().unwrap(), b_wrote);
        assert!(
            ra.events().iter().any(|e| matches!(
                e,
                Event::ConversationEnded { reason: EndReason::LeaseLost, .. }
            ))
        );
    }

    #[test]
    fn a_durable_task_on_a_shared_store_without_compare_and_set_is_refused() {
        let built = Bot::builder()
            .provider(TestProvider::new())
            .store(Arc::new(PlainStore::shared()))
            .every_with(Duration::from_secs(60), TaskOptions::durable("report"), |_| async {
                Ok::<_, BotError>(())
            })
            .build();
        assert!(
            matches!(built, Err(ConfigError::DurableTaskNeedsAtomicStore { ref task }) if task == "report"),
            "{built:?}"
        );
        // A store of its own (one process) claims occurrences safely without it.
        let local = Bot::builder()
            .provider(TestProvider::new())
            .store(Arc::new(MemoryStore::new()))
            .every_with(Duration::from_secs(60), TaskOptions::durable("report"), |_| async {
                Ok::<_, BotError>(())
            })
            .build();
        assert!(local.is_ok());
    }
}
