//! The new part of a mail: what the correspondent wrote this time, without the quoted mail
//! they answer and without their signature.

/// Whether `line` opens the quote of the mail being answered: `On <date>, <who> wrote:`
/// (and its common translations), or a client's "original message" separator.
fn opens_quote(line: &str) -> bool {
    let l = line.trim();
    let lower = l.to_lowercase();
    let intro = ["on ", "le ", "am ", "el ", "il ", "em ", "op "];
    (intro.iter().any(|p| lower.starts_with(p))
        && [
            "wrote:",
            "a écrit :",
            "a écrit:",
            "schrieb:",
            "escribió:",
            "ha scritto:",
            "escreveu:",
            "schreef:",
        ]
        .iter()
        .any(|s| lower.ends_with(s)))
        || lower.starts_with("-----original message-----")
        || lower.starts_with("-------- original message --------")
        || lower.starts_with("________________________________")
}

/// The new part of the plain text `body`: everything before the first quoted line (`>`), the
/// line introducing the quote, or the signature separator (`-- `), trimmed. When that leaves
/// nothing (a mail that is all quote), the whole body, trimmed.
pub(crate) fn new_part(body: &str) -> String {
    let lines: Vec<&str> = body.lines().collect();
    let mut end = lines.len();
    for (i, line) in lines.iter().enumerate() {
        let bare = line.trim_end_matches('\r');
        if bare == "-- " || bare == "--" || bare.starts_with('>') || opens_quote(bare) {
            end = i;
            break;
        }
        // An introduction wrapped over two lines: "On Mon, 1 Jan 2026, Ana" / "<a@b> wrote:".
        if i + 1 < lines.len()
            && bare.trim().to_lowercase().starts_with("on ")
            && lines[i + 1].trim().to_lowercase().ends_with("wrote:")
        {
            end = i;
            break;
        }
    }
    let new = lines[..end].join("\n");
    let new = new.trim();
    if new.is_empty() { body.trim().to_owned() } else { new.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quoted_reply_and_the_signature_are_stripped() {
        let cases = [
            (
                "yes please\n\nOn Mon, 1 Jan 2026 at 10:00, Bot <bot@x.org> wrote:\n> Want it?\n",
                "yes please",
            ),
            ("yes\n> Want it?\n> more\n", "yes"),
            ("Thanks!\nAna\n-- \nAna Pérez\nACME Corp\n", "Thanks!\nAna"),
            ("ok\n\n-----Original Message-----\nFrom: bot\n", "ok"),
            ("d'accord\n\nLe lun. 1 janv. 2026, Bot a écrit :\n> ?\n", "d'accord"),
            ("sure\nOn Mon, 1 Jan 2026, Bot\n<bot@x.org> wrote:\n> ?\n", "sure"),
            ("  just text  \n", "just text"),
            ("> only a quote\n", "> only a quote"),
        ];
        for (body, new) in cases {
            assert_eq!(new_part(body), new, "{body:?}");
        }
    }

    #[test]
    fn a_line_that_merely_starts_with_on_is_kept() {
        assert_eq!(new_part("On second thought, no.\nThanks"), "On second thought, no.\nThanks");
    }
}
