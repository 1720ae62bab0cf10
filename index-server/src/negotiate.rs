//! PEP 691 content negotiation on `Accept`.

/// The representations a simple page can be served as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimpleFormat {
    Json,
    V1Html,
    TextHtml,
}

impl SimpleFormat {
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Json => "application/vnd.pypi.simple.v1+json",
            Self::V1Html => "application/vnd.pypi.simple.v1+html",
            Self::TextHtml => "text/html; charset=utf-8",
        }
    }

    pub fn is_json(self) -> bool {
        self == Self::Json
    }

    /// Our preference among equally weighted types.
    fn rank(self) -> u8 {
        match self {
            Self::Json => 3,
            Self::V1Html => 2,
            Self::TextHtml => 1,
        }
    }
}

/// Pick a representation for `accept`, or `None` when nothing acceptable can be served (406).
/// No header means anything, and anything is served as `text/html` for the oldest clients.
pub fn negotiate(accept: Option<&str>) -> Option<SimpleFormat> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Some(SimpleFormat::TextHtml);
    };
    let mut best: Option<(u32, SimpleFormat)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
        let mut q = 1000u32;
        for param in parts {
            if let Some((k, v)) = param.split_once('=')
                && k.trim().eq_ignore_ascii_case("q")
            {
                q = parse_q(v.trim()).unwrap_or(0);
            }
        }
        let format = match media.as_str() {
            "application/vnd.pypi.simple.v1+json" | "application/vnd.pypi.simple.latest+json" => SimpleFormat::Json,
            "application/vnd.pypi.simple.v1+html" | "application/vnd.pypi.simple.latest+html" => SimpleFormat::V1Html,
            "text/html" | "text/*" | "*/*" => SimpleFormat::TextHtml,
            "application/*" => SimpleFormat::Json,
            _ => continue,
        };
        if q == 0 {
            continue;
        }
        let better = match best {
            None => true,
            Some((bq, bf)) => q > bq || (q == bq && format.rank() > bf.rank()),
        };
        if better {
            best = Some((q, format));
        }
    }
    best.map(|(_, f)| f)
}

/// A q-value as thousandths (`0.5` → 500), per RFC 9110's `qvalue` grammar.
fn parse_q(v: &str) -> Option<u32> {
    let value: f64 = v.parse().ok()?;
    (0.0..=1.0).contains(&value).then(|| (value * 1000.0).round() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use SimpleFormat::*;

    #[test]
    fn real_clients() {
        // pip
        assert_eq!(
            negotiate(Some(
                "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html; q=0.1, text/html; q=0.01"
            )),
            Some(Json)
        );
        // uv
        assert_eq!(
            negotiate(Some(
                "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
            )),
            Some(Json)
        );
        // old pip, browsers, curl
        assert_eq!(negotiate(Some("text/html")), Some(TextHtml));
        assert_eq!(negotiate(Some("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")), Some(TextHtml));
        assert_eq!(negotiate(Some("*/*")), Some(TextHtml));
        assert_eq!(negotiate(None), Some(TextHtml));
    }

    #[test]
    fn q_values_and_refusals() {
        assert_eq!(negotiate(Some("application/vnd.pypi.simple.v1+json;q=0.1, text/html")), Some(TextHtml));
        assert_eq!(negotiate(Some("application/vnd.pypi.simple.latest+json")), Some(Json));
        assert_eq!(negotiate(Some("application/vnd.pypi.simple.v1+html")), Some(V1Html));
        assert_eq!(negotiate(Some("application/vnd.pypi.simple.v1+json;q=0")), None);
        assert_eq!(negotiate(Some("image/png")), None);
        assert_eq!(negotiate(Some("text/html;q=0.5, application/vnd.pypi.simple.v1+html;q=0.5")), Some(V1Html));
    }
}
