//! Decoders of what ksched reads off the network, in plain Rust so that
//! `cargo test` covers them: a pod watch frame in Kubernetes' protobuf read
//! into the JSON value of its projection (`watch_proto`), the machinery and
//! key lists that read a JSON object's kept fields (`projection`), and a
//! Prometheus instant query's answer (`prometheus`). The PyO3 binding
//! (`rust/python`) builds Python objects from them with the GIL, or calls
//! them without it.

pub mod projection;
pub mod prometheus;
mod protobuf;
pub mod watch_proto;
