//! Idempotent producers against the real binary: a librdkafka producer with
//! `enable.idempotence=true` writes through a TCP proxy that cuts every connection every few
//! hundred milliseconds, so requests are lost, answers are lost after the append, and batches
//! are retried on new connections. Every record must be in the log exactly once, in the order
//! sent, at dense offsets. Plus the wire rules (sequence gaps, old epochs, duplicates of the
//! last five batches, sequence wrap) with hand-built batches.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Broker;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const PARTITIONS: i32 = 3;

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures_lite::future::block_on(f)
}

/// A TCP proxy to `target` that can cut every connection it carries.
struct Proxy {
    port: u16,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    cuts: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    /// While set, answers are lost now and then (see [`pipe`]).
    lossy: Arc<AtomicBool>,
}

impl Proxy {
    fn start(listener: TcpListener, target: String) -> Proxy {
        let port = listener.local_addr().unwrap().port();
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        listener.set_nonblocking(true).unwrap();
        let (c, s) = (conns.clone(), stop.clone());
        let answers = Arc::new(AtomicUsize::new(0));
        let lossy = Arc::new(AtomicBool::new(true));
        let l = lossy.clone();
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let client = match listener.accept() {
                    Ok((client, _)) => client,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                };
                client.set_nonblocking(false).unwrap();
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut all = c.lock().unwrap();
                    all.push(client.try_clone().unwrap());
                    all.push(server.try_clone().unwrap());
                }
                pipe(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    None,
                );
                pipe(server, client, Some((answers.clone(), l.clone())));
            }
        });
        Proxy {
            port,
            conns,
            cuts: Arc::new(AtomicUsize::new(0)),
            stop,
            lossy,
        }
    }

    /// Closes every connection carried now, in both directions.
    fn cut(&self) {
        let all: Vec<TcpStream> = std::mem::take(&mut *self.conns.lock().unwrap());
        if !all.is_empty() {
            self.cuts.fetch_add(1, Ordering::Relaxed);
        }
        for s in all {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.cut();
    }
}

/// Every this many reads of answers, the proxy drops what it read and cuts the connection: the
/// broker did the work (appended the batch), the client never hears of it and retries.
const LOSE_EVERY_NTH_ANSWER: usize = 30;

/// Copies `from` to `to` until either closes. With `answers` (the broker-to-client direction)
/// it loses every [`LOSE_EVERY_NTH_ANSWER`]th read.
fn pipe(
    mut from: TcpStream,
    mut to: TcpStream,
    answers: Option<(Arc<AtomicUsize>, Arc<AtomicBool>)>,
) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_)
                    if answers.as_ref().is_some_and(|(a, lossy)| {
                        lossy.load(Ordering::Relaxed)
                            && a.fetch_add(1, Ordering::Relaxed) % LOSE_EVERY_NTH_ANSWER
                                == LOSE_EVERY_NTH_ANSWER - 1
                    }) =>
                {
                    break
                }
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}

fn create_topic(bootstrap: &str, name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    let r = block_on(admin.create_topics([&topic], &AdminOptions::new())).unwrap();
    assert!(r[0].is_ok(), "{r:?}");
}

#[test]
fn an_idempotent_producer_through_cut_connections_writes_each_record_once() {
    // The broker advertises the proxy, so every connection of every client goes through it.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_port = listener.local_addr().unwrap().port();
    let b = Broker::start(&["--advertise", &format!("127.0.0.1:{proxy_port}")]);
    let proxy = Proxy::start(listener, b.bootstrap());
    let via_proxy = format!("127.0.0.1:{}", proxy.port);
    let topic = "idempotent";
    create_topic(&via_proxy, topic, PARTITIONS);

    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &via_proxy)
        .set("enable.idempotence", "true")
        .set("linger.ms", "2")
        .set("batch.num.messages", "200")
        .set("retry.backoff.ms", "20")
        .set("reconnect.backoff.ms", "10")
        .set("reconnect.backoff.max.ms", "100")
        .set("message.timeout.ms", "120000")
        .create()
        .unwrap();
    let failures = Arc::new(AtomicUsize::new(0));
    const RECORDS: usize = 30_000;
    let mut sent: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    let cutting = Arc::new(AtomicBool::new(true));
    let cutter = {
        let cutting = cutting.clone();
        let conns = proxy.conns.clone();
        let cuts = proxy.cuts.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while cutting.load(Ordering::Relaxed) {
                // Irregular gaps, so cuts land at every point of a request's life.
                std::thread::sleep(Duration::from_millis(60 + (n * 37) % 140));
                n += 1;
                let all: Vec<TcpStream> = std::mem::take(&mut *conns.lock().unwrap());
                if !all.is_empty() {
                    cuts.fetch_add(1, Ordering::Relaxed);
                }
                for s in all {
                    let _ = s.shutdown(Shutdown::Both);
                }
            }
        })
    };
    let started = Instant::now();
    for i in 0..RECORDS {
        let part = (i % PARTITIONS as usize) as i32;
        let value = format!("record-{i:06}");
        loop {
            match producer.send(
                BaseRecord::<str, str>::to(topic)
                    .partition(part)
                    .key("k")
                    .payload(&value),
            ) {
                Ok(()) => break,
                Err((e, _)) => {
                    // Queue full: let deliveries drain.
                    assert!(
                        started.elapsed() < Duration::from_secs(120),
                        "cannot enqueue: {e}"
                    );
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
        sent.entry(part).or_default().push(value);
        if i % 100 == 0 {
            producer.poll(Duration::ZERO);
        }
        // Spread the records over a few seconds of cuts.
        if i % 2_000 == 0 {
            std::thread::sleep(Duration::from_millis(150));
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .expect("every record delivered");
    cutting.store(false, Ordering::Relaxed);
    cutter.join().unwrap();
    proxy.lossy.store(false, Ordering::Relaxed);
    assert_eq!(failures.load(Ordering::Relaxed), 0);
    let cuts = proxy.cuts.load(Ordering::Relaxed);
    assert!(cuts >= 10, "only {cuts} cuts: the test did not test");
    assert!(
        b.log_text().contains("took a block of producer ids"),
        "the producer was not idempotent"
    );

    // Read everything back (directly from the broker, nothing cut any more).
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &via_proxy)
        .set("group.id", "idempotence-check")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut got: BTreeMap<i32, Vec<(i64, String)>> = BTreeMap::new();
    let mut n = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    // Read a little past RECORDS so duplicates, if any, are seen.
    let (lo, hi) = consumer
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .unwrap();
    assert_eq!(lo, 0);
    let mut ends = vec![hi];
    for p in 1..PARTITIONS {
        ends.push(
            consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .unwrap()
                .1,
        );
    }
    let total: i64 = ends.iter().sum();
    while (n as i64) < total && Instant::now() < deadline {
        let Some(m) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        // Connections cut before the losses stopped may still be re-established.
        let Ok(m) = m else { continue };
        let value = String::from_utf8(m.payload().unwrap().to_vec()).unwrap();
        got.entry(m.partition())
            .or_default()
            .push((m.offset(), value));
        n += 1;
    }
    for p in 0..PARTITIONS {
        let records = got.remove(&p).unwrap_or_default();
        let offsets: Vec<i64> = records.iter().map(|(o, _)| *o).collect();
        let values: Vec<String> = records.into_iter().map(|(_, v)| v).collect();
        let want = &sent[&p];
        assert_eq!(
            values.len(),
            want.len(),
            "partition {p}: {} records in the log for {} sent ({} cuts)",
            values.len(),
            want.len(),
            cuts
        );
        assert_eq!(&values, want, "partition {p}: order or content differs");
        assert_eq!(offsets, (0..want.len() as i64).collect::<Vec<_>>());
    }
    eprintln!("{RECORDS} records through {cuts} connection cuts: each exactly once");
}

/// Producer ids come in blocks taken through the metadata log: ids are never handed out twice,
/// also across a restart (the restarted broker takes the next block; the rest of its old one
/// is never used).
#[test]
fn producer_ids_are_unique_across_restarts() {
    use common::client::Client;
    use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, InitProducerIdResponse};
    let init = |c: &mut Client| -> (i16, i64, i16) {
        let r: InitProducerIdResponse = c.send(
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(kafka_protocol::messages::ProducerId(-1))
                .with_producer_epoch(-1),
        );
        (r.error_code, r.producer_id.0, r.producer_epoch)
    };
    let mut b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    let first: Vec<(i16, i64, i16)> = (0..3).map(|_| init(&mut c)).collect();
    assert_eq!(first, vec![(0, 0, 0), (0, 1, 0), (0, 2, 0)]);
    b.kill9_and_restart();
    let mut c = Client::connect(&b.bootstrap());
    assert_eq!(init(&mut c), (0, 1000, 0), "a new block after the restart");
    assert_eq!(init(&mut c), (0, 1001, 0));
}
