//! Python-compatible renderings: `json.dumps` with its default separators and ASCII escaping,
//! and `repr` of a string list (what `str(list)` prints), so outputs match TheRock's byte for
//! byte.

use serde::Serialize;

/// `json.dumps(value)`: `", "` and `": "` separators, non-ASCII as `\uXXXX`.
pub fn py_json<T: Serialize + ?Sized>(value: &T) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PyFormatter);
    // Serializing our own plain data into a Vec cannot fail.
    value.serialize(&mut ser).expect("serializing to memory");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

struct PyFormatter;

impl serde_json::ser::Formatter for PyFormatter {
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, writer: &mut W, first: bool) -> std::io::Result<()> {
        if first { Ok(()) } else { writer.write_all(b", ") }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, writer: &mut W, first: bool) -> std::io::Result<()> {
        if first { Ok(()) } else { writer.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        writer.write_all(b": ")
    }

    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        for c in fragment.chars() {
            if c.is_ascii() {
                writer.write_all(&[c as u8])?;
            } else {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    write!(writer, "\\u{unit:04x}")?;
                }
            }
        }
        Ok(())
    }
}

/// Python's `repr(str)`: single quotes unless the text has a `'` and no `"`.
pub(crate) fn py_repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `str(list_of_str)`, e.g. `['test:rocprim', 'test:hipblas']`.
pub fn py_repr_list<S: AsRef<str>>(items: &[S]) -> String {
    let inner: Vec<String> = items.iter().map(|s| py_repr_str(s.as_ref())).collect();
    format!("[{}]", inner.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_spacing_and_escapes_match_python() {
        let v = serde_json::json!({"a": [1, "x"], "b": {"c": true, "d": null}, "e": "é☃𝄞\"\\"});
        assert_eq!(py_json(&v), r#"{"a": [1, "x"], "b": {"c": true, "d": null}, "e": "\u00e9\u2603\ud834\udd1e\"\\"}"#);
        assert_eq!(py_json(&Vec::<String>::new()), "[]");
    }

    #[test]
    fn repr_matches_python() {
        assert_eq!(py_repr_list::<&str>(&[]), "[]");
        assert_eq!(py_repr_list(&["test:a", "b"]), "['test:a', 'b']");
        assert_eq!(py_repr_str("it's"), "\"it's\"");
        assert_eq!(py_repr_str("a'\"b"), "'a\\'\"b'");
        assert_eq!(py_repr_str("x\ty\\"), "'x\\ty\\\\'");
    }
}
