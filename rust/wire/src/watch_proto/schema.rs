//! Which fields of a Pod (and of a `Status`) the projection reads, per message,
//! with their protobuf numbers, what each holds and when its JSON shows it.

/// What a field holds.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    Str,
    Int,
    Bool,
    /// `metav1.Time`: seconds = 1, nanos = 2; JSON has it to the second, in UTC.
    Time,
    Msg(&'static [Field]),
    /// A message whose fields sit in the parent's JSON object (`Volume`'s `VolumeSource`).
    Inline(&'static [Field]),
    StrList,
    MsgList(&'static [Field]),
    /// `map<string, string>`: entries with key = 1, value = 2.
    StrMap,
    /// `map<string, string>` of which only the keys starting `ksched.io/` are read.
    OursMap,
    /// `ResourceList`: `map<string, Quantity>`, a Quantity being its string (= 1).
    Quantities,
}

/// When a field appears in the JSON.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Show {
    /// A pointer, or a list or map with `omitempty`: when present (in protobuf, non-empty).
    Set,
    /// A value with `omitempty`: when not zero.
    NotZero,
    /// A value (or struct) without `omitempty`; a nil list as `null`.
    Always,
}

pub(super) struct Field {
    pub number: u64,
    pub name: &'static str,
    pub kind: Kind,
    pub show: Show,
}

const fn f(number: u64, name: &'static str, kind: Kind, show: Show) -> Field {
    Field { number, name, kind, show }
}

use Kind::{Bool, Inline, Int, Msg, MsgList, OursMap, Quantities, Str, StrList, StrMap, Time};
use Show::{Always, NotZero, Set};

// Each message below lists only the fields the projection reads, in the Go struct's order.
pub(super) const OWNER_REFERENCE: &[Field] = &[
    f(5, "apiVersion", Str, Always),
    f(1, "kind", Str, Always),
    f(3, "name", Str, Always),
    f(4, "uid", Str, Always),
    f(6, "controller", Bool, Set),
    f(7, "blockOwnerDeletion", Bool, Set),
];
pub(super) const OBJECT_META: &[Field] = &[
    f(1, "name", Str, NotZero),
    f(3, "namespace", Str, NotZero),
    f(5, "uid", Str, NotZero),
    f(6, "resourceVersion", Str, NotZero),
    f(8, "creationTimestamp", Time, NotZero),
    f(9, "deletionTimestamp", Time, Set),
    f(11, "labels", StrMap, Set),
    f(12, "annotations", OursMap, Set),
    f(13, "ownerReferences", MsgList(OWNER_REFERENCE), Set),
];
pub(super) const RESOURCE_CLAIM: &[Field] = &[f(1, "name", Str, Always), f(2, "request", Str, NotZero)];
pub(super) const RESOURCES: &[Field] = &[
    f(1, "limits", Quantities, Set),
    f(2, "requests", Quantities, Set),
    f(3, "claims", MsgList(RESOURCE_CLAIM), Set),
];
pub(super) const CONTAINER_PORT: &[Field] = &[
    f(1, "name", Str, NotZero),
    f(2, "hostPort", Int, NotZero),
    f(3, "containerPort", Int, Always),
    f(4, "protocol", Str, NotZero),
    f(5, "hostIP", Str, NotZero),
];
pub(super) const CONTAINER: &[Field] = &[
    f(1, "name", Str, Always),
    f(2, "image", Str, NotZero),
    f(6, "ports", MsgList(CONTAINER_PORT), Set),
    f(8, "resources", Msg(RESOURCES), Always),
    f(24, "restartPolicy", Str, Set),
];
pub(super) const NODE_SELECTOR_REQUIREMENT: &[Field] = &[
    f(1, "key", Str, Always),
    f(2, "operator", Str, Always),
    f(3, "values", StrList, Set),
];
pub(super) const NODE_SELECTOR_TERM: &[Field] = &[
    f(1, "matchExpressions", MsgList(NODE_SELECTOR_REQUIREMENT), Set),
    f(2, "matchFields", MsgList(NODE_SELECTOR_REQUIREMENT), Set),
];
pub(super) const NODE_SELECTOR: &[Field] = &[f(1, "nodeSelectorTerms", MsgList(NODE_SELECTOR_TERM), Always)];
pub(super) const PREFERRED_SCHEDULING_TERM: &[Field] = &[f(1, "weight", Int, Always), f(2, "preference", Msg(NODE_SELECTOR_TERM), Always)];
pub(super) const NODE_AFFINITY: &[Field] = &[
    f(1, "requiredDuringSchedulingIgnoredDuringExecution", Msg(NODE_SELECTOR), Set),
    f(
        2,
        "preferredDuringSchedulingIgnoredDuringExecution",
        MsgList(PREFERRED_SCHEDULING_TERM),
        Set,
    ),
];
pub(super) const LABEL_SELECTOR_REQUIREMENT: &[Field] = NODE_SELECTOR_REQUIREMENT;
pub(super) const LABEL_SELECTOR: &[Field] = &[
    f(1, "matchLabels", StrMap, Set),
    f(2, "matchExpressions", MsgList(LABEL_SELECTOR_REQUIREMENT), Set),
];
pub(super) const POD_AFFINITY_TERM: &[Field] = &[
    f(1, "labelSelector", Msg(LABEL_SELECTOR), Set),
    f(2, "namespaces", StrList, Set),
    f(3, "topologyKey", Str, Always),
    f(4, "namespaceSelector", Msg(LABEL_SELECTOR), Set),
    f(5, "matchLabelKeys", StrList, Set),
    f(6, "mismatchLabelKeys", StrList, Set),
];
pub(super) const WEIGHTED_POD_AFFINITY_TERM: &[Field] =
    &[f(1, "weight", Int, Always), f(2, "podAffinityTerm", Msg(POD_AFFINITY_TERM), Always)];
pub(super) const POD_AFFINITY: &[Field] = &[
    f(1, "requiredDuringSchedulingIgnoredDuringExecution", MsgList(POD_AFFINITY_TERM), Set),
    f(
        2,
        "preferredDuringSchedulingIgnoredDuringExecution",
        MsgList(WEIGHTED_POD_AFFINITY_TERM),
        Set,
    ),
];
pub(super) const AFFINITY: &[Field] = &[
    f(1, "nodeAffinity", Msg(NODE_AFFINITY), Set),
    f(2, "podAffinity", Msg(POD_AFFINITY), Set),
    f(3, "podAntiAffinity", Msg(POD_AFFINITY), Set),
];
pub(super) const TOLERATION: &[Field] = &[
    f(1, "key", Str, NotZero),
    f(2, "operator", Str, NotZero),
    f(3, "value", Str, NotZero),
    f(4, "effect", Str, NotZero),
    f(5, "tolerationSeconds", Int, Set),
];
pub(super) const TOPOLOGY_SPREAD_CONSTRAINT: &[Field] = &[
    f(1, "maxSkew", Int, Always),
    f(2, "topologyKey", Str, Always),
    f(3, "whenUnsatisfiable", Str, Always),
    f(4, "labelSelector", Msg(LABEL_SELECTOR), Set),
    f(5, "minDomains", Int, Set),
    f(6, "nodeAffinityPolicy", Str, Set),
    f(7, "nodeTaintsPolicy", Str, Set),
    f(8, "matchLabelKeys", StrList, Set),
];
pub(super) const SCHEDULING_GATE: &[Field] = &[f(1, "name", Str, Always)];
pub(super) const POD_RESOURCE_CLAIM: &[Field] = &[
    f(1, "name", Str, Always),
    f(3, "resourceClaimName", Str, Set),
    f(4, "resourceClaimTemplateName", Str, Set),
];
pub(super) const CLAIM_VOLUME_SOURCE: &[Field] = &[f(1, "claimName", Str, Always), f(2, "readOnly", Bool, NotZero)];
pub(super) const IMAGE_VOLUME_SOURCE: &[Field] = &[f(1, "reference", Str, NotZero), f(2, "pullPolicy", Str, NotZero)];
/// An ephemeral volume counts by its presence; what it holds is not read.
pub(super) const UNREAD: &[Field] = &[];
pub(super) const VOLUME_SOURCE: &[Field] = &[
    f(10, "persistentVolumeClaim", Msg(CLAIM_VOLUME_SOURCE), Set),
    f(29, "ephemeral", Msg(UNREAD), Set),
    f(30, "image", Msg(IMAGE_VOLUME_SOURCE), Set),
];
pub(super) const VOLUME: &[Field] = &[f(1, "name", Str, Always), f(2, "", Inline(VOLUME_SOURCE), Always)];
pub(super) const POD_SPEC: &[Field] = &[
    f(1, "volumes", MsgList(VOLUME), Set),
    f(20, "initContainers", MsgList(CONTAINER), Set),
    f(2, "containers", MsgList(CONTAINER), Always),
    f(7, "nodeSelector", StrMap, Set),
    f(10, "nodeName", Str, NotZero),
    f(18, "affinity", Msg(AFFINITY), Set),
    f(19, "schedulerName", Str, NotZero),
    f(22, "tolerations", MsgList(TOLERATION), Set),
    f(24, "priorityClassName", Str, NotZero),
    f(25, "priority", Int, Set),
    f(31, "preemptionPolicy", Str, Set),
    f(32, "overhead", Quantities, Set),
    f(33, "topologySpreadConstraints", MsgList(TOPOLOGY_SPREAD_CONSTRAINT), Set),
    f(38, "schedulingGates", MsgList(SCHEDULING_GATE), Set),
    f(39, "resourceClaims", MsgList(POD_RESOURCE_CLAIM), Set),
    f(40, "resources", Msg(RESOURCES), Set),
];
pub(super) const POD_CONDITION: &[Field] = &[
    f(1, "type", Str, Always),
    f(2, "status", Str, Always),
    f(4, "lastTransitionTime", Time, Always),
    f(5, "reason", Str, NotZero),
    f(6, "message", Str, NotZero),
];
pub(super) const CONTAINER_STATUS: &[Field] = &[
    f(1, "name", Str, Always),
    f(10, "allocatedResources", Quantities, Set),
    f(11, "resources", Msg(RESOURCES), Set),
];
pub(super) const POD_STATUS: &[Field] = &[
    f(1, "phase", Str, NotZero),
    f(2, "conditions", MsgList(POD_CONDITION), Set),
    f(11, "nominatedNodeName", Str, NotZero),
    f(7, "startTime", Time, Set),
    f(10, "initContainerStatuses", MsgList(CONTAINER_STATUS), Set),
    f(8, "containerStatuses", MsgList(CONTAINER_STATUS), Set),
    f(19, "allocatedResources", Quantities, Set),
    f(20, "resources", Msg(RESOURCES), Set),
];
pub(super) const POD: &[Field] = &[
    f(1, "metadata", Msg(OBJECT_META), Always),
    f(2, "spec", Msg(POD_SPEC), Always),
    f(3, "status", Msg(POD_STATUS), Always),
];
/// `metav1.Status`, what an ERROR event holds.
/// A list's `ListMeta`: what paging reads.
pub(super) const LIST_META: &[Field] = &[f(2, "resourceVersion", Str, NotZero), f(3, "continue", Str, NotZero)];

pub(super) const STATUS: &[Field] = &[
    f(3, "message", Str, NotZero),
    f(4, "reason", Str, NotZero),
    f(6, "code", Int, NotZero),
];
