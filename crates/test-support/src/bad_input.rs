//! Table-driven bad requests: each names the status, the error code and a word the message
//! must contain (the field). Every service's bad-input test runs its table through
//! [`check_all`], which also fails any 500.

use reqwest::Method;

/// One bad request and the answer it must get.
#[derive(Debug, Clone)]
pub struct BadRequest {
    /// What the case is about.
    pub name: &'static str,
    /// Method.
    pub method: Method,
    /// Path and query.
    pub path: String,
    /// Headers (a JSON content type unless removed).
    pub headers: Vec<(&'static str, String)>,
    /// Body bytes.
    pub body: Vec<u8>,
    /// Expected status.
    pub status: u16,
    /// Expected `code`.
    pub code: &'static str,
    /// A word the `message` must contain (the field it names).
    pub mentions: &'static str,
}

impl BadRequest {
    /// A request with a JSON content type.
    pub fn new(name: &'static str, method: Method, path: impl Into<String>, body: &str) -> Self {
        Self {
            name,
            method,
            path: path.into(),
            headers: vec![("content-type", "application/json".to_owned())],
            body: body.as_bytes().to_vec(),
            status: 0,
            code: "",
            mentions: "",
        }
    }

    /// The answer it must get.
    pub fn expect(mut self, status: u16, code: &'static str, mentions: &'static str) -> Self {
        (self.status, self.code, self.mentions) = (status, code, mentions);
        self
    }

    /// Adds (or replaces) a header.
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.retain(|(n, _)| *n != name);
        self.headers.push((name, value.into()));
        self
    }

    /// Removes a header.
    pub fn without(mut self, name: &'static str) -> Self {
        self.headers.retain(|(n, _)| *n != name);
        self
    }

    /// Replaces the body.
    pub fn body(mut self, body: Vec<u8>) -> Self {
        self.body = body;
        self
    }
}

/// Sends every case to `base` and returns a line per case that got another answer than its
/// own (status, code, message naming the field, exactly `{"code","message"}`). Panics on a 500.
pub async fn check_all(base: &str, cases: &[BadRequest]) -> Vec<String> {
    let http = reqwest::Client::new();
    let mut failures = Vec::new();
    for case in cases {
        let mut request = http
            .request(case.method.clone(), format!("{base}{}", case.path))
            .body(case.body.clone());
        for (name, value) in &case.headers {
            request = request.header(*name, value);
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        assert_ne!(
            status, 500,
            "{}: a 500 for a caller's mistake: {text}",
            case.name
        );
        let body: serde_json::Value =
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
        let ok = status == case.status
            && body["code"] == case.code
            && body["message"]
                .as_str()
                .is_some_and(|m| m.contains(case.mentions))
            && body.as_object().is_some_and(|o| o.len() == 2);
        if !ok {
            failures.push(format!(
                "{}: got {status} {text}; want {} {} mentioning {:?}",
                case.name, case.status, case.code, case.mentions
            ));
        }
    }
    failures
}
