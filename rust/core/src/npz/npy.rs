//! The `.npy` header (numpy's array file format, versions 1.0, 2.0 and 3.0): magic, header
//! length, then a Python dict literal `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`.
//! Only what numpy writes for plain arrays is accepted: a little-endian (or byte-order-free)
//! numeric, bool or unicode dtype, never a structured or object dtype (those need unpickling).

/// A parsed `.npy` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    /// The dtype as numpy spells it, checked against the accepted forms (e.g. `<f4`, `|b1`, `<U5`).
    pub descr: String,
    /// The array's shape (an empty shape is a scalar).
    pub shape: Vec<u64>,
    /// Column-major element order.
    pub fortran_order: bool,
    /// Bytes from the magic to the first data byte.
    pub header_len: usize,
    /// Bytes of data the shape and dtype call for (checked for overflow).
    pub data_len: u64,
}

/// Longest header accepted: numpy writes a few hundred bytes (it refuses more than 10,000 itself
/// unless told otherwise), so a longer one is garbage or an attack.
pub const MAX_HEADER_LEN: usize = 1 << 16;
/// Most dimensions accepted (numpy 1.x's limit).
pub const MAX_DIMS: usize = 32;

const MAGIC: &[u8] = b"\x93NUMPY";

/// How many bytes of a member hold the fixed prefix and the header length field for `version`.
fn prefix_len(major: u8) -> Option<usize> {
    match major {
        1 => Some(10),
        2 | 3 => Some(12),
        _ => None,
    }
}

/// The length of the whole header (prefix included) from the first 12 bytes (or fewer) of a
/// member; `Err` says what is wrong.
pub fn header_len(start: &[u8]) -> Result<usize, String> {
    if start.len() < 10 || !start.starts_with(MAGIC) {
        return Err("it does not start with the .npy magic".into());
    }
    let (major, minor) = (start[6], start[7]);
    let prefix = prefix_len(major)
        .filter(|_| minor == 0)
        .ok_or_else(|| format!("it has .npy format version {major}.{minor} (1.0, 2.0 and 3.0 are read)"))?;
    let len = match (prefix, start.get(8..12)) {
        (10, _) => usize::from(u16::from_le_bytes([start[8], start[9]])),
        (_, Some(&[a, b, c, d])) => usize::try_from(u32::from_le_bytes([a, b, c, d])).unwrap_or(usize::MAX),
        _ => return Err("its .npy header is truncated".into()),
    };
    if len > MAX_HEADER_LEN {
        return Err(format!("its .npy header claims {len} bytes (at most {MAX_HEADER_LEN} are read)"));
    }
    Ok(prefix + len)
}

/// Parses a whole header (`bytes` holds at least [`header_len`] bytes; more are ignored).
pub fn parse(bytes: &[u8]) -> Result<NpyHeader, String> {
    parse_with(bytes, false)
}

/// Parses the header of a `.npy` buffer that carries one tensor of a checkpoint (a Flower
/// `Array`'s data): what `parse` accepts, and the raw-byte dtypes numpy writes for the ml_dtypes
/// types (bfloat16 and the float8 types): void of one or two bytes (`<V2`, `|V1`) and `<f1`
/// (float8_e5m2). The caller says which dtype the bytes are.
pub fn parse_npy_buffer(bytes: &[u8]) -> Result<NpyHeader, String> {
    parse_with(bytes, true)
}

fn parse_with(bytes: &[u8], raw_bytes: bool) -> Result<NpyHeader, String> {
    let total = header_len(bytes)?;
    let prefix = if bytes[6] == 1 { 10 } else { 12 };
    let body = bytes.get(prefix..total).ok_or("its .npy header is truncated")?;
    // Versions 1 and 2 are latin-1, 3 is UTF-8; the dict numpy writes is ASCII either way.
    let text =
        std::str::from_utf8(body).ok().filter(|t| t.is_ascii()).ok_or("its .npy header is not ASCII text")?;
    let dict = parse_dict(text.trim_end_matches(['\n', ' ', '\0']))?;
    let descr = dict.descr.ok_or("its .npy header has no 'descr'")?;
    let shape = dict.shape.ok_or("its .npy header has no 'shape'")?;
    let fortran_order = dict.fortran.ok_or("its .npy header has no 'fortran_order'")?;
    let itemsize = match raw_byte_size(&descr) {
        Some(n) if raw_bytes => n,
        _ => itemsize(&descr)?,
    };
    let data_len = shape
        .iter()
        .try_fold(itemsize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| format!("its shape {shape:?} of {descr} overflows 64 bits"))?;
    Ok(NpyHeader { descr, shape, fortran_order, header_len: total, data_len })
}

/// Bytes per element of the raw-byte dtypes numpy writes for the ml_dtypes types, or `None`.
fn raw_byte_size(descr: &str) -> Option<u64> {
    match descr {
        "<V1" | "|V1" | "<f1" => Some(1),
        "<V2" | "|V2" => Some(2),
        _ => None,
    }
}

/// Bytes per element of an accepted dtype string; anything else is refused.
fn itemsize(descr: &str) -> Result<u64, String> {
    let refuse = || {
        format!(
            "it has dtype {descr:?}: only bool, integer, floating, complex and unicode arrays in \
             little-endian order are read (never objects, which would need unpickling)"
        )
    };
    let mut chars = descr.chars();
    let order = chars.next().ok_or_else(refuse)?;
    let kind = chars.next().ok_or_else(refuse)?;
    let digits = chars.as_str();
    if !matches!(order, '<' | '|' | '=') || digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refuse());
    }
    let n: u64 = digits.parse().map_err(|_| refuse())?;
    let ok = match kind {
        'b' => n == 1,
        'i' | 'u' => matches!(n, 1 | 2 | 4 | 8),
        'f' => matches!(n, 2 | 4 | 8),
        'c' => matches!(n, 8 | 16),
        'U' => (1..=1 << 20).contains(&n),
        _ => false,
    };
    // '|' (no byte order) only for one-byte types, as numpy writes them.
    if !ok || (order == '|' && kind != 'b' && n != 1) {
        return Err(refuse());
    }
    Ok(if kind == 'U' { 4 * n } else { n })
}

#[derive(Default)]
struct Dict {
    descr: Option<String>,
    shape: Option<Vec<u64>>,
    fortran: Option<bool>,
}

/// A tiny parser for the one dict literal numpy writes: string keys, values a string, a bool or a
/// tuple of non-negative integers; each key once; nothing else.
fn parse_dict(text: &str) -> Result<Dict, String> {
    let bad = |what: &str| format!("its .npy header is not a valid header dict ({what})");
    let mut p = Parser { s: text.as_bytes(), at: 0 };
    p.expect(b'{').ok_or_else(|| bad("no '{'"))?;
    let mut dict = Dict::default();
    loop {
        p.skip_space();
        if p.eat(b'}') {
            break;
        }
        let key = p.string().ok_or_else(|| bad("a key is not a string"))?;
        p.expect(b':').ok_or_else(|| bad("no ':' after a key"))?;
        p.skip_space();
        let dup = match key.as_str() {
            "descr" => {
                dict.descr.replace(p.string().ok_or_else(|| bad("'descr' is not a string"))?).is_some()
            }
            "fortran_order" => {
                dict.fortran.replace(p.boolean().ok_or_else(|| bad("bad 'fortran_order'"))?).is_some()
            }
            "shape" => dict.shape.replace(p.shape().map_err(|what| bad(&what))?).is_some(),
            other => return Err(bad(&format!("unknown key {other:?}"))),
        };
        if dup {
            return Err(bad(&format!("{key:?} appears twice")));
        }
        p.skip_space();
        if !p.eat(b',') {
            p.expect(b'}').ok_or_else(|| bad("no ',' or '}' after a value"))?;
            break;
        }
    }
    p.skip_space();
    if p.at != p.s.len() {
        return Err(bad("text after the dict"));
    }
    Ok(dict)
}

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn skip_space(&mut self) {
        while self.s.get(self.at).is_some_and(|b| *b == b' ') {
            self.at += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.s.get(self.at) == Some(&b);
        self.at += usize::from(hit);
        hit
    }

    fn expect(&mut self, b: u8) -> Option<()> {
        self.skip_space();
        self.eat(b).then_some(())
    }

    /// A quoted string without escapes (numpy's keys and dtype strings have none).
    fn string(&mut self) -> Option<String> {
        let quote = *self.s.get(self.at).filter(|q| matches!(q, b'\'' | b'"'))?;
        let rest = self.s.get(self.at + 1..)?;
        let len = rest.iter().position(|&b| b == quote)?;
        let text = rest.get(..len)?;
        if text.contains(&b'\\') {
            return None;
        }
        self.at += len + 2;
        String::from_utf8(text.to_vec()).ok()
    }

    fn boolean(&mut self) -> Option<bool> {
        for (word, value) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if self.s.get(self.at..)?.starts_with(word) {
                self.at += word.len();
                return Some(value);
            }
        }
        None
    }

    /// `()`, `(n,)` or `(n, m, ...)` with at most [`MAX_DIMS`] dims of at most 19 digits each;
    /// `Err` says what is wrong (the dims are counted to say how many there are: the header's
    /// length bounds them).
    fn shape(&mut self) -> Result<Vec<u64>, String> {
        let bad = || "bad 'shape'".to_owned();
        self.expect(b'(').ok_or_else(bad)?;
        let mut dims = Vec::new();
        loop {
            self.skip_space();
            if self.eat(b')') {
                break;
            }
            let start = self.at;
            while self.s.get(self.at).is_some_and(u8::is_ascii_digit) {
                self.at += 1;
            }
            let digits = self.s.get(start..self.at).ok_or_else(bad)?;
            if digits.is_empty() {
                return Err(bad());
            }
            let text = std::str::from_utf8(digits).map_err(|_| bad())?;
            let dim = text.parse::<u64>().ok().filter(|_| digits.len() <= 19).ok_or_else(|| {
                let shown: String = text.chars().take(40).collect();
                format!(
                    "'shape' has a dimension too large ({shown}{})",
                    if text.len() > 40 { "..." } else { "" }
                )
            })?;
            dims.push(dim);
            self.skip_space();
            if !self.eat(b',') {
                self.expect(b')').ok_or_else(bad)?;
                // numpy writes a one-dim tuple as "(n,)": "(n)" is an int, not a tuple
                if dims.len() == 1 {
                    return Err(bad());
                }
                break;
            }
        }
        if dims.len() > MAX_DIMS {
            return Err(format!("'shape' has {} dims (at most {MAX_DIMS} are read)", dims.len()));
        }
        Ok(dims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(dict: &str) -> Vec<u8> {
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&u16::try_from(dict.len()).unwrap().to_le_bytes());
        out.extend_from_slice(dict.as_bytes());
        out
    }

    #[test]
    fn numpy_headers_parse() {
        let h = parse(&header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }    \n")).unwrap();
        assert_eq!(
            (h.descr.as_str(), h.shape.as_slice(), h.fortran_order, h.data_len),
            ("<f4", &[2, 3][..], false, 24)
        );
        let h = parse(&header("{'descr': '|b1', 'fortran_order': True, 'shape': (), }")).unwrap();
        assert_eq!((h.shape.len(), h.data_len, h.fortran_order), (0, 1, true));
        assert_eq!(
            parse(&header("{'descr':'<U3','fortran_order':False,'shape':(5,)}")).unwrap().data_len,
            60
        );
    }

    #[test]
    fn malformed_headers_are_refused() {
        for dict in [
            "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }",
            "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",
            "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }",
            "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4), }",
            "{'descr': '<f4', 'fortran_order': False}",
            "{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x",
        ] {
            assert!(parse(&header(dict)).is_err(), "{dict}");
        }
        assert!(parse(b"\x93NUMPY\x04\x00\x00\x00").is_err());
        assert!(parse(b"\x93NUMPY\x01\x00\xff\xff{").is_err());
        assert!(header_len(b"\x93NUMPY\x02\x00\xff\xff\xff\xff").is_err());
    }

    #[test]
    fn raw_byte_dtypes_only_in_buffers() {
        for (descr, size) in [("<V2", 2u64), ("|V1", 1), ("<f1", 1)] {
            let text = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (3,), }}\n");
            let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
            bytes.extend_from_slice(&(text.len() as u16).to_le_bytes());
            bytes.extend_from_slice(text.as_bytes());
            let header = parse_npy_buffer(&bytes).unwrap();
            assert_eq!((header.data_len, header.header_len), (3 * size, bytes.len()));
            assert!(parse(&bytes).unwrap_err().contains("only bool, integer"), "{descr}");
        }
    }

    #[test]
    fn bad_shapes_say_what_is_wrong() {
        let dims65 = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}", "1, ".repeat(65));
        assert!(parse(&header(&dims65)).unwrap_err().contains("'shape' has 65 dims (at most 32 are read)"));
        let huge = "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 1180591620717411303424), }";
        assert!(parse(&header(huge)).unwrap_err().contains("dimension too large (1180591620717411303424)"));
        let dims32 = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}", "1, ".repeat(32));
        assert_eq!(parse(&header(&dims32)).unwrap().shape, vec![1; 32]);
    }
}
