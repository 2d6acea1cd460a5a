//! Errors the engine reports for inconsistent inputs (a bug in the caller,
//! never a property of the cluster: unschedulable pods are outcomes, not errors).

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineError {
    /// An array's length does not match the table it belongs to.
    Shape { what: &'static str, expected: usize, got: usize },
    /// A CSR offset array is not monotonic or points past its values.
    Offsets { what: &'static str },
    /// An index refers past the end of its table.
    Index { what: &'static str, index: i64, len: usize },
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Shape { what, expected, got } => {
                write!(f, "{what}: expected length {expected}, got {got}")
            }
            EngineError::Offsets { what } => write!(f, "{what}: offsets are not a valid CSR index"),
            EngineError::Index { what, index, len } => {
                write!(f, "{what}: index {index} out of range 0..{len}")
            }
        }
    }
}

impl std::error::Error for EngineError {}

pub fn check_len(what: &'static str, got: usize, expected: usize) -> Result<(), EngineError> {
    if got == expected {
        Ok(())
    } else {
        Err(EngineError::Shape { what, expected, got })
    }
}

/// Offsets of a CSR table with `rows` rows over `values` entries.
pub fn check_offsets(what: &'static str, offsets: &[i64], rows: usize, values: usize) -> Result<(), EngineError> {
    check_len(what, offsets.len(), rows + 1)?;
    if offsets[0] != 0 || offsets.windows(2).any(|w| w[0] > w[1]) || offsets[rows] as usize != values {
        return Err(EngineError::Offsets { what });
    }
    Ok(())
}

pub fn check_index(what: &'static str, index: i64, len: usize) -> Result<(), EngineError> {
    if index < 0 || index as usize >= len {
        Err(EngineError::Index { what, index, len })
    } else {
        Ok(())
    }
}
