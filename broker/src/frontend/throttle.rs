//! Applies the client quotas (`crate::quota`) to one request: what it owes ([`Charge`]), the
//! time its handler spends on the shard, and the throttle its answer carries. The handlers'
//! dispatch (`handlers::call`) begins a charge before the handler runs and finishes it on the
//! answer before it is encoded. Runs on the connection's shard.

use std::any::Any;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, FetchRequest, OffsetForLeaderEpochRequest, RequestHeader};

use crate::quota::{rate, QuotaType, Resolution, Throttled, QUOTA_TYPES};
use crate::security::Session;
use crate::shard::BrokerShard;

/// Whether a decoded request is exempt from every quota: a replica's Fetch or
/// OffsetForLeaderEpoch, WriteTxnMarkers, the SASL requests.
fn exempt(api: ApiKey, req: &dyn Any) -> bool {
    match api {
        ApiKey::WriteTxnMarkers | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => true,
        ApiKey::Fetch => req
            .downcast_ref::<FetchRequest>()
            .is_some_and(|r| r.replica_id.0 >= 0 || r.replica_state.replica_id.0 >= 0),
        ApiKey::OffsetForLeaderEpoch => req
            .downcast_ref::<OffsetForLeaderEpochRequest>()
            .is_some_and(|r| r.replica_id.0 >= 0),
        _ => false,
    }
}

/// What one request owes the quotas. Most requests of most brokers owe nothing: then it is
/// empty and costs nothing.
pub struct Charge {
    active: Option<Active>,
}

struct Active {
    resolution: Rc<Resolution>,
    /// Produce: the request's bytes.
    produce_bytes: u64,
    /// The request quota applies (not exempt, not an internal client).
    timed: bool,
    /// Time the handler's future spent being polled.
    spent: Duration,
}

impl Charge {
    /// Nothing to charge.
    pub fn none() -> Charge {
        Charge { active: None }
    }

    /// What the request `req` (decoded; Produce's body is `produce_bytes` long) will owe.
    /// A consumer's Fetch under a byte quota asks for at most what the quota lets through in
    /// its span, so that one answer can pass (Kafka does the same).
    pub fn begin(
        shard: &BrokerShard,
        hdr: &RequestHeader,
        session: &Session,
        api: ApiKey,
        req: &mut dyn Any,
        produce_bytes: usize,
    ) -> Charge {
        let index = shard.quota_index();
        if index.is_empty() || exempt(api, req) {
            return Charge::none();
        }
        let client_id = hdr.client_id.as_deref().unwrap_or("");
        let resolution =
            session
                .quota
                .resolve(&shard.quota_sensors, &index, &session.principal, client_id);
        if let (Some(fetch), Some(applied)) = (
            req.downcast_mut::<FetchRequest>(),
            &resolution.applied[QuotaType::Fetch as usize],
        ) {
            // The most the quota lets through in the rate's current span (Kafka's
            // `getMaxValueInQuotaWindow`, over its full span): an answer that could never
            // pass would be throttled forever.
            let span_ms = applied.rate.span_ms(Instant::now());
            let most = (applied.limit * span_ms / 1000.0).clamp(1.0, i32::MAX as f64) as i32;
            if fetch.max_bytes <= 0 || fetch.max_bytes > most {
                fetch.max_bytes = most;
            }
        }
        let timed = resolution.applied[QuotaType::Request as usize].is_some()
            && !client_id.starts_with("__");
        let owes_bytes = match api {
            ApiKey::Produce => resolution.applied[QuotaType::Produce as usize].is_some(),
            ApiKey::Fetch => resolution.applied[QuotaType::Fetch as usize].is_some(),
            _ => false,
        };
        if !timed && !owes_bytes {
            return Charge::none();
        }
        Charge {
            active: Some(Active {
                resolution,
                produce_bytes: if api == ApiKey::Produce {
                    produce_bytes as u64
                } else {
                    0
                },
                timed,
                spent: Duration::ZERO,
            }),
        }
    }

    /// Runs the handler's future, timing its polls when the request quota applies. If the
    /// future is dropped midway nothing is charged.
    pub async fn run<F: Future>(&mut self, fut: F) -> F::Output {
        let Some(active) = self.active.as_mut().filter(|a| a.timed) else {
            return fut.await;
        };
        let mut fut = pin!(fut);
        std::future::poll_fn(|cx| {
            let started = Instant::now();
            let poll = fut.as_mut().poll(cx);
            active.spent += started.elapsed();
            poll
        })
        .await
    }

    /// Charges the request and throttles it: sets the answer's `throttle_time_ms` (a
    /// throttled Fetch is emptied), counts it, and mutes the connection for that long.
    /// `answer` is `None` when nothing is sent (acks=0).
    pub fn finish<R: Throttled>(
        self,
        shard: &BrokerShard,
        session: &Session,
        answer: Option<&mut R>,
    ) {
        let Some(active) = self.active else {
            return;
        };
        let now = Instant::now();
        let applied = &active.resolution.applied;
        let mut throttle = [0u64; 3];
        if let Some(a) = &applied[QuotaType::Produce as usize] {
            if active.produce_bytes > 0 {
                a.rate.record(now, active.produce_bytes);
                throttle[0] =
                    rate::throttle_ms(a.rate.measure_with(now, 0), a.limit, a.rate.span_ms(now));
            }
        }
        let mut answer = answer;
        // A Fetch is charged its record bytes only if they are sent: a throttled Fetch
        // answers empty, whichever quota throttled it (as Kafka).
        let mut fetch_bytes = 0;
        if let (Some(a), Some(resp)) = (&applied[QuotaType::Fetch as usize], answer.as_deref_mut())
        {
            fetch_bytes = resp.record_bytes() as u64;
            if fetch_bytes > 0 {
                let observed = a.rate.measure_with(now, fetch_bytes);
                throttle[1] = rate::throttle_ms(observed, a.limit, a.rate.span_ms(now));
            }
        }
        if let (Some(a), true) = (&applied[QuotaType::Request as usize], active.timed) {
            // Percent of one core: 1% is 10 ms of CPU per second, 10 microseconds per ms.
            let micros = active.spent.as_micros() as u64;
            a.rate.record(now, micros);
            let observed = a.rate.measure_with(now, 0) / 10_000.0;
            throttle[2] = rate::throttle_ms(observed, a.limit, a.rate.span_ms(now))
                .min(shard.quota_sensors.request_throttle_max_ms());
        }
        let ms = throttle.iter().copied().max().unwrap_or(0);
        if let (Some(a), true) = (&applied[QuotaType::Fetch as usize], ms == 0) {
            if fetch_bytes > 0 {
                a.rate.record(now, fetch_bytes);
            }
        }
        if ms == 0 {
            return;
        }
        for t in QUOTA_TYPES {
            if throttle[t as usize] > 0 {
                shard.counters.quota_throttled(t, throttle[t as usize]);
            }
        }
        let ms_i32 = ms.min(i32::MAX as u64) as i32;
        if let Some(resp) = answer {
            resp.empty_for_throttle();
            resp.set_throttle_time_ms(ms_i32);
        }
        session.quota.mute(now, ms);
    }
}
