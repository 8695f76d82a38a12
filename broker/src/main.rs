//! `keel`: a Kafka-compatible, thread-per-core streaming log broker (see [`keel_broker`]).

fn main() {
    keel_broker::startup::main();
}
