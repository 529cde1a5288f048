//! The parts of a kept mail that `fetch_media` serves, named by URL, where `<message-id>` is
//! the mail's message id (a digest of its sender and `Message-ID`, see `parse::message_key`):
//!
//! - `email:<message-id>`: the whole mail, as received (RFC 822);
//! - `email:<message-id>/text`: its whole plain text, quote and signature included;
//! - `email:<message-id>/html`: its HTML body;
//! - `email:<message-id>/attachment/<n>`: its attachment number `n` (from 0), decoded.

use mail_parser::MessageParser;

/// Which part of a mail a URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    Raw,
    Text,
    Html,
    Attachment(u32),
}

/// The URL of attachment `n` of mail `id`.
pub(crate) fn attachment_url(id: &str, n: u32) -> String {
    format!("email:{id}/attachment/{n}")
}

/// The mail id and part a URL names, or `None` when it is not one of this provider's.
pub(crate) fn parse_url(url: &str) -> Option<(&str, Part)> {
    let rest = url.strip_prefix("email:")?;
    if let Some(id) = rest.strip_suffix("/html") {
        return Some((id, Part::Html));
    }
    if let Some(id) = rest.strip_suffix("/text") {
        return Some((id, Part::Text));
    }
    if let Some((id, n)) = rest.rsplit_once("/attachment/")
        && let Ok(n) = n.parse()
    {
        return Some((id, Part::Attachment(n)));
    }
    Some((rest, Part::Raw))
}

/// The bytes of `part` of the mail `raw`, or `None` when it has no such part.
pub(crate) fn extract(raw: &[u8], part: &Part) -> Option<Vec<u8>> {
    if *part == Part::Raw {
        return Some(raw.to_vec());
    }
    let message = MessageParser::default().parse(raw)?;
    match part {
        Part::Raw => Some(raw.to_vec()),
        Part::Text => message.body_text(0).map(|t| t.into_owned().into_bytes()),
        Part::Html => message.body_html(0).map(|t| t.into_owned().into_bytes()),
        Part::Attachment(n) => message.attachment(*n).map(|p| p.contents().to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_mail_and_a_part() {
        assert_eq!(parse_url("email:a@b"), Some(("a@b", Part::Raw)));
        assert_eq!(parse_url("email:a@b/html"), Some(("a@b", Part::Html)));
        assert_eq!(parse_url("email:a@b/text"), Some(("a@b", Part::Text)));
        assert_eq!(parse_url(&attachment_url("a@b", 2)), Some(("a@b", Part::Attachment(2))));
        assert_eq!(parse_url("https://x"), None);
    }

    #[test]
    fn the_html_and_the_whole_text_of_a_mail_are_extracted() {
        let raw = b"From: a@b.org\r\nMIME-Version: 1.0\r\n\
            Content-Type: multipart/alternative; boundary=\"q\"\r\n\r\n--q\r\n\
            Content-Type: text/plain\r\n\r\nhi\r\n> old\r\n--q\r\n\
            Content-Type: text/html\r\n\r\n<p>hi</p>\r\n--q--\r\n";
        let html = String::from_utf8(extract(raw, &Part::Html).unwrap()).unwrap();
        assert!(html.contains("<p>hi</p>"), "{html}");
        let text = String::from_utf8(extract(raw, &Part::Text).unwrap()).unwrap();
        assert!(text.contains("> old"), "{text}");
        assert_eq!(extract(raw, &Part::Attachment(0)), None);
    }
}
