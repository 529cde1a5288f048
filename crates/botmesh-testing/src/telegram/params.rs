//! A call's parameters, read the ways the Bot API accepts them: the query string, and a body
//! that is JSON, a urlencoded form, or `multipart/form-data` carrying uploads.
//!
//! Values are read leniently, as Telegram does: `"42"` is a number and `"{...}"` a JSON
//! object wherever one is expected, since forms and multipart parts only carry text. teloxide
//! sends most methods as JSON, and those that may upload a file (`sendPhoto`, `sendDocument`,
//! `setWebhook`) as multipart, with nested objects such as `reply_markup` as JSON text parts
//! and each upload as a part named by a random id that the file's field points at with
//! `attach://<id>`.

use std::collections::HashMap;

use axum::extract::{FromRequest, Multipart, Query, Request};
use axum::http::header::CONTENT_TYPE;
use axum::{Form, body};
use serde_json::{Map, Value};

use super::faults::ApiError;

/// The largest body a call may carry: Telegram takes photos up to 10 MB and documents up to
/// 50 MB; a stand-in for tests needs less.
pub(super) const MAX_BODY: usize = 20 * 1024 * 1024;

/// A file a call refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum InputFile {
    /// Bytes uploaded with the call.
    Upload { file_name: Option<String>, bytes: Vec<u8> },
    /// A string: a `file_id` or an HTTP URL.
    Reference(String),
}

/// One multipart part, kept whole so that `attach://` can find it.
#[derive(Debug)]
struct Part {
    file_name: Option<String>,
    bytes: Vec<u8>,
}

/// The parameters of one call.
#[derive(Debug, Default)]
pub(super) struct Params {
    fields: Map<String, Value>,
    parts: HashMap<String, Part>,
}

fn malformed(what: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("malformed request: {what}"))
}

impl Params {
    /// Reads the query string, then the body by its content type; body fields win.
    pub(super) async fn from_request(request: Request) -> Result<Self, ApiError> {
        let mut params = Self::default();
        let query = Query::<Vec<(String, String)>>::try_from_uri(request.uri())
            .map_err(|e| malformed(format!("query string: {e}")))?;
        for (k, v) in query.0 {
            params.fields.insert(k, Value::String(v));
        }
        let content_type = request
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        if content_type.starts_with("multipart/form-data") {
            let mut multipart = Multipart::from_request(request, &())
                .await
                .map_err(|e| malformed(format!("multipart body: {e}")))?;
            while let Some(field) =
                multipart.next_field().await.map_err(|e| malformed(format!("multipart: {e}")))?
            {
                let Some(name) = field.name().map(str::to_owned) else { continue };
                let file_name = field.file_name().map(str::to_owned);
                let bytes = field.bytes().await.map_err(|e| malformed(format!("part: {e}")))?;
                if file_name.is_none()
                    && let Ok(text) = std::str::from_utf8(&bytes)
                {
                    params.fields.insert(name.clone(), Value::String(text.to_owned()));
                }
                params.parts.insert(name, Part { file_name, bytes: bytes.to_vec() });
            }
        } else if content_type.starts_with("application/x-www-form-urlencoded") {
            let Form(form) = Form::<Vec<(String, String)>>::from_request(request, &())
                .await
                .map_err(|e| malformed(format!("form body: {e}")))?;
            for (k, v) in form {
                params.fields.insert(k, Value::String(v));
            }
        } else {
            let bytes = body::to_bytes(request.into_body(), MAX_BODY)
                .await
                .map_err(|e| malformed(format!("body: {e}")))?;
            if !bytes.iter().all(u8::is_ascii_whitespace) {
                match serde_json::from_slice::<Value>(&bytes) {
                    Ok(Value::Object(fields)) => params.fields.extend(fields),
                    Ok(_) => return Err(malformed("the JSON body is not an object")),
                    Err(e) => return Err(malformed(format!("JSON body: {e}"))),
                }
            }
        }
        Ok(params)
    }

    /// Builds parameters from JSON fields, for tests.
    #[cfg(test)]
    pub(super) fn from_json(fields: Value) -> Self {
        match fields {
            Value::Object(fields) => Self { fields, parts: HashMap::new() },
            _ => Self::default(),
        }
    }

    /// The field, unless it is absent or `null`.
    fn get(&self, name: &str) -> Option<&Value> {
        self.fields.get(name).filter(|v| !v.is_null())
    }

    /// A string field; numbers and booleans are taken as their text.
    pub(super) fn string(&self, name: &str) -> Result<Option<String>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(Some(v.to_string())),
            Some(_) => Err(ApiError::bad_request(format!("field \"{name}\" must be a string"))),
        }
    }

    /// An integer field, given as a number or as its text.
    pub(super) fn int(&self, name: &str) -> Result<Option<i64>, ApiError> {
        let bad = || ApiError::bad_request(format!("field \"{name}\" must be an integer"));
        match self.get(name) {
            None => Ok(None),
            Some(Value::Number(n)) => n.as_i64().map(Some).ok_or_else(bad),
            Some(Value::String(s)) => s.trim().parse().map(Some).map_err(|_| bad()),
            Some(_) => Err(bad()),
        }
    }

    /// A boolean field, given as a boolean or as `true`/`false`/`1`/`0`.
    pub(super) fn boolean(&self, name: &str) -> Result<Option<bool>, ApiError> {
        let bad = || ApiError::bad_request(format!("field \"{name}\" must be a boolean"));
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::Number(n)) => match n.as_i64() {
                Some(0) => Ok(Some(false)),
                Some(1) => Ok(Some(true)),
                _ => Err(bad()),
            },
            Some(Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
                "true" | "1" => Ok(Some(true)),
                "false" | "0" => Ok(Some(false)),
                _ => Err(bad()),
            },
            Some(_) => Err(bad()),
        }
    }

    /// A JSON object or array field, given as JSON or as JSON text.
    pub(super) fn json(&self, name: &str) -> Result<Option<Value>, ApiError> {
        let bad = || ApiError::bad_request(format!("can't parse field \"{name}\" as JSON"));
        match self.get(name) {
            None => Ok(None),
            Some(v @ (Value::Object(_) | Value::Array(_))) => Ok(Some(v.clone())),
            Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                Ok(v @ (Value::Object(_) | Value::Array(_))) => Ok(Some(v)),
                _ => Err(bad()),
            },
            Some(_) => Err(bad()),
        }
    }

    /// A file field: a multipart upload under the field's own name, an upload that the field
    /// points at with `attach://<part>`, or a `file_id` or URL string.
    pub(super) fn input_file(&self, name: &str) -> Result<Option<InputFile>, ApiError> {
        if let Some(part) = self.parts.get(name)
            && part.file_name.is_some()
        {
            return Ok(Some(upload(part)));
        }
        let Some(value) = self.string(name)? else { return Ok(None) };
        match value.strip_prefix("attach://") {
            Some(part) => match self.parts.get(part) {
                Some(part) => Ok(Some(upload(part))),
                None => Err(ApiError::bad_request(format!(
                    "field \"{name}\" attaches part \"{part}\", which the request lacks"
                ))),
            },
            None => Ok(Some(InputFile::Reference(value))),
        }
    }
}

fn upload(part: &Part) -> InputFile {
    let file_name = part.file_name.clone().filter(|n| !n.is_empty());
    InputFile::Upload { file_name, bytes: part.bytes.clone() }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn values_are_read_leniently() {
        let p = Params::from_json(json!({
            "a": "42", "b": 7, "c": "true", "d": 0, "e": "{\"x\":1}", "f": null, "g": "x"
        }));
        assert_eq!(p.int("a").unwrap(), Some(42));
        assert_eq!(p.int("b").unwrap(), Some(7));
        assert_eq!(p.string("b").unwrap().as_deref(), Some("7"));
        assert_eq!(p.boolean("c").unwrap(), Some(true));
        assert_eq!(p.boolean("d").unwrap(), Some(false));
        assert_eq!(p.json("e").unwrap(), Some(json!({"x": 1})));
        assert_eq!(p.int("f").unwrap(), None);
        assert_eq!(p.int("missing").unwrap(), None);
        assert_eq!(p.int("g").unwrap_err().code, 400);
        assert_eq!(p.json("g").unwrap_err().code, 400);
        assert_eq!(p.boolean("g").unwrap_err().code, 400);
        assert_eq!(p.input_file("g").unwrap(), Some(InputFile::Reference("x".to_owned())));
    }

    #[test]
    fn an_attachment_to_a_missing_part_is_refused() {
        let p = Params::from_json(json!({"photo": "attach://nope"}));
        assert_eq!(p.input_file("photo").unwrap_err().code, 400);
    }
}
