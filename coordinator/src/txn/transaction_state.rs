//! A transaction's state (Kafka's `TransactionState`): its ids and names as the log and the
//! admin APIs carry them, and the transitions it allows.

/// A transaction's state: Kafka's `TransactionState`, with its ids and names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TxnState {
    /// No transaction open (after InitProducerId).
    Empty,
    /// Partitions added; the producer writes.
    Ongoing,
    /// EndTxn(commit) is durable; commit markers are being written.
    PrepareCommit,
    /// EndTxn(abort), a timeout or a fencing InitProducerId is durable; abort markers are being
    /// written.
    PrepareAbort,
    /// Every partition has its commit marker.
    CompleteCommit,
    /// Every partition has its abort marker.
    CompleteAbort,
    /// Expiring: only ever a pending state here.
    Dead,
    /// Fencing a producer: passed through within one call here.
    PrepareEpochFence,
}

impl TxnState {
    pub const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    /// The id in `TransactionLogValue.transaction_status`.
    pub fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.id() == id)
    }

    /// The name DescribeTransactions and ListTransactions use.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// A ListTransactions state filter; `None` for a name Kafka does not know (answered in the
    /// response's `unknown_state_filters`).
    pub fn from_name(name: &str) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Kafka's `validPreviousStates` (transactions V1: `PrepareAbort` only from `Ongoing`).
    pub(super) fn valid_previous(self) -> &'static [TxnState] {
        use TxnState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[Ongoing, PrepareEpochFence],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteCommit, CompleteAbort],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// Whether an id in this state expires when idle (no transaction open).
    pub fn expiration_allowed(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }

    pub(super) fn is_prepare(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}
