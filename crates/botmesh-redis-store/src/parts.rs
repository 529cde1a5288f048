//! Strings a queued call owns: copied once into one string, and split back where each ended.

/// `N` strings copied once into one (a queued call outlives its caller's borrow).
#[derive(Debug)]
pub(crate) struct Parts<const N: usize> {
    text: String,
    /// Where each part ends in `text`.
    ends: [usize; N],
}

impl<const N: usize> Parts<N> {
    pub(crate) fn new(parts: [&str; N]) -> Self {
        let mut text = String::with_capacity(parts.iter().map(|p| p.len()).sum());
        let mut ends = [0; N];
        for (end, part) in ends.iter_mut().zip(parts) {
            text.push_str(part);
            *end = text.len();
        }
        Self { text, ends }
    }

    /// The parts, in the order given.
    pub(crate) fn get(&self) -> [&str; N] {
        let mut start = 0;
        self.ends.map(|end| {
            // The ends were taken at the parts' boundaries, which are character boundaries.
            let part = self.text.get(start..end).unwrap_or_default();
            start = end;
            part
        })
    }

    /// The bytes of all parts together.
    pub(crate) fn bytes(&self) -> usize {
        self.text.len()
    }
}

#[cfg(test)]
mod tests {
    use super::Parts;

    #[test]
    fn parts_come_back_apart_from_their_one_string() {
        let record = Parts::new(["tg:ünï", "{\"text\":\"héllo\"}"]);
        assert_eq!(record.get(), ["tg:ünï", "{\"text\":\"héllo\"}"]);
        let empty = Parts::new(["", "p"]);
        assert_eq!(empty.get(), ["", "p"]);
    }
}
