//! How the caller encodes the tables: resource columns, CSR rows, and each
//! enum's values with a table of their Kubernetes names (a binding reads the
//! tables instead of copying the values).

/// Resource column of CPU (millicores).
pub const CPU: usize = 0;
/// Resource column of memory (bytes).
pub const MEMORY: usize = 1;
/// Resource column of ephemeral storage (bytes).
pub const EPHEMERAL_STORAGE: usize = 2;
/// Columns below this are the native resources; the rest are scalar resources.
pub const FIRST_SCALAR: usize = 3;

/// Taint and toleration effects.
pub const EFFECT_ALL: u8 = 0; // a toleration with an empty effect
pub const EFFECT_NO_SCHEDULE: u8 = 1;
pub const EFFECT_PREFER_NO_SCHEDULE: u8 = 2;
pub const EFFECT_NO_EXECUTE: u8 = 3;

/// Toleration operators.
pub const TOLERATION_EQUAL: u8 = 0;
pub const TOLERATION_EXISTS: u8 = 1;

/// Node selector operators.
pub const OP_IN: u8 = 0;
pub const OP_NOT_IN: u8 = 1;
pub const OP_EXISTS: u8 = 2;
pub const OP_DOES_NOT_EXIST: u8 = 3;
pub const OP_GT: u8 = 4;
pub const OP_LT: u8 = 5;

/// Host port protocols.
pub const PROTOCOL_TCP: u8 = 0;
pub const PROTOCOL_UDP: u8 = 1;
pub const PROTOCOL_SCTP: u8 = 2;

/// Label selector operators of pod selectors (metav1.LabelSelectorOperator).
pub const SEL_IN: u8 = 0;
pub const SEL_NOT_IN: u8 = 1;
pub const SEL_EXISTS: u8 = 2;
pub const SEL_DOES_NOT_EXIST: u8 = 3;

/// Taint and toleration effects by their Kubernetes names ("" is a toleration's empty effect).
pub const EFFECTS: [(&str, u8); 4] = [
    ("", EFFECT_ALL),
    ("NoSchedule", EFFECT_NO_SCHEDULE),
    ("PreferNoSchedule", EFFECT_PREFER_NO_SCHEDULE),
    ("NoExecute", EFFECT_NO_EXECUTE),
];
pub const TOLERATION_OPERATORS: [(&str, u8); 2] = [("Equal", TOLERATION_EQUAL), ("Exists", TOLERATION_EXISTS)];
/// Node selector requirement operators.
pub const SELECTOR_OPERATORS: [(&str, u8); 6] = [
    ("In", OP_IN),
    ("NotIn", OP_NOT_IN),
    ("Exists", OP_EXISTS),
    ("DoesNotExist", OP_DOES_NOT_EXIST),
    ("Gt", OP_GT),
    ("Lt", OP_LT),
];
/// Pod label selector requirement operators.
pub const POD_SELECTOR_OPERATORS: [(&str, u8); 4] = [
    ("In", SEL_IN),
    ("NotIn", SEL_NOT_IN),
    ("Exists", SEL_EXISTS),
    ("DoesNotExist", SEL_DOES_NOT_EXIST),
];
pub const PROTOCOLS: [(&str, u8); 3] = [("TCP", PROTOCOL_TCP), ("UDP", PROTOCOL_UDP), ("SCTP", PROTOCOL_SCTP)];
/// A spread constraint's `whenUnsatisfiable` as `SpreadConstraints::hard`.
pub const WHEN_UNSATISFIABLE: [(&str, u8); 2] = [("ScheduleAnyway", 0), ("DoNotSchedule", 1)];
/// `nodeAffinityPolicy` / `nodeTaintsPolicy` as `SpreadConstraints::honor_*`.
pub const INCLUSION_POLICIES: [(&str, u8); 2] = [("Ignore", 0), ("Honor", 1)];

#[inline]
pub fn row(offsets: &[i64], i: usize) -> std::ops::Range<usize> {
    offsets[i] as usize..offsets[i + 1] as usize
}
