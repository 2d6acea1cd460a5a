//! Owned fixtures for the table-driven tests: build small clusters as plain
//! vectors and borrow them as the engine's input views. The one place tests
//! build inputs; test modules add only their own named cases.

mod classes;
mod nodes;
mod pod_table;
mod pods;
mod spread;
mod victims;
mod volumes;

pub use classes::*;
pub use nodes::*;
pub use pod_table::*;
pub use pods::*;
pub use spread::*;
pub use victims::*;
pub use volumes::*;
