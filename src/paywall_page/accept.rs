//! Whether a request prefers an HTML page to JSON, from its `Accept` header.

use http::HeaderMap;
use http::header::ACCEPT;

/// True when `Accept` ranks `text/html` above `application/json` (with `q` weights, wildcards
/// counting for what they match): a browser navigation does, `fetch()`, `curl` and agents
/// (`*/*`, `application/json`, or no `Accept`) do not.
pub(crate) fn prefers_html(headers: &HeaderMap) -> bool {
    let mut html = 0.0_f32;
    let mut json = 0.0_f32;
    for value in headers.get_all(ACCEPT) {
        let Ok(value) = value.to_str() else { continue };
        for range in value.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            match media.as_str() {
                "text/html" => html = html.max(q),
                "application/json" => json = json.max(q),
                "*/*" => json = json.max(q),
                "application/*" => json = json.max(q),
                _ => {}
            }
        }
    }
    html > 0.0 && html > json
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(accept: &str) -> bool {
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, accept.parse().unwrap());
        prefers_html(&headers)
    }

    #[test]
    fn browsers_get_html_clients_get_json() {
        assert!(with(
            "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8"
        ));
        assert!(with("text/html"));
        assert!(!with("*/*"));
        assert!(!with("application/json"));
        assert!(!with("application/json, text/html;q=0.5"));
        assert!(!with("text/html;q=0"));
        assert!(!prefers_html(&HeaderMap::new()));
    }
}
