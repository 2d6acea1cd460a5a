//! Protobuf's wire format, as far as Kubernetes' messages use it: a message as
//! the sequence of its fields (number and value, in encoded order), varints,
//! length-delimited bytes and map entries. No schema: callers say what a field
//! number means.

/// Protobuf's wire types (the low three bits of a field's key).
pub(crate) const VARINT: u64 = 0;
pub(crate) const FIXED64: u64 = 1;
pub(crate) const LEN: u64 = 2;
pub(crate) const FIXED32: u64 = 5;

/// One field of a message's protobuf encoding: a key (number and wire type) and its value.
pub(crate) enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of one protobuf message, in their encoded order.
struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.data.split_first().ok_or("a truncated varint")?;
            self.data = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a varint longer than 10 bytes".into())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.data.len() {
            return Err("a field longer than its message".into());
        }
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        Ok(head)
    }

    fn next(&mut self) -> Result<Option<(u64, Wire<'a>)>, String> {
        if self.data.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let value = match key & 7 {
            VARINT => Wire::Varint(self.varint()?),
            LEN => {
                let n = usize::try_from(self.varint()?).map_err(|_| "a length past the address space")?;
                Wire::Bytes(self.take(n)?)
            }
            FIXED64 => {
                self.take(8)?;
                Wire::Fixed
            }
            FIXED32 => {
                self.take(4)?;
                Wire::Fixed
            }
            other => return Err(format!("wire type {other} (groups are not used by Kubernetes)")),
        };
        Ok(Some((key >> 3, value)))
    }
}

pub(crate) fn fields(data: &[u8]) -> impl Iterator<Item = Result<(u64, Wire<'_>), String>> {
    let mut reader = Reader { data };
    std::iter::from_fn(move || reader.next().transpose())
}

pub(crate) fn text(data: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(data).map_err(|_| "a string that is not UTF-8".into())
}

pub(crate) fn bytes_of<'a>(wire: &Wire<'a>, name: &str) -> Result<&'a [u8], String> {
    match wire {
        Wire::Bytes(data) => Ok(data),
        _ => Err(format!("{name}: not length-delimited")),
    }
}

pub(crate) fn varint_of(wire: &Wire<'_>, name: &str) -> Result<u64, String> {
    match wire {
        Wire::Varint(v) => Ok(*v),
        _ => Err(format!("{name}: not a varint")),
    }
}

/// A map entry's key (= 1) and value (= 2) bytes; protobuf's default (empty) where absent.
pub(crate) fn entry(data: &[u8]) -> Result<(&[u8], &[u8]), String> {
    let (mut k, mut v): (&[u8], &[u8]) = (b"", b"");
    for item in fields(data) {
        match item? {
            (1, wire) => k = bytes_of(&wire, "map key")?,
            (2, wire) => v = bytes_of(&wire, "map value")?,
            _ => {}
        }
    }
    Ok((k, v))
}
