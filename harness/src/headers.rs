//! An Envoy header map: lower-cased keys, pseudo-headers first, repeated keys kept in order.

/// Header pairs as Envoy keeps them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct HeaderMap {
    pairs: Vec<(String, String)>,
}

impl HeaderMap {
    /// Builds a map the way Envoy's codec does: keys lower-cased.
    pub(crate) fn from_pairs<K: AsRef<str>, V: AsRef<str>>(pairs: &[(K, V)]) -> Self {
        let mut map = Self::default();
        for (k, v) in pairs {
            map.add(k.as_ref(), v.as_ref());
        }
        map
    }

    pub(crate) fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    pub(crate) fn len(&self) -> usize {
        self.pairs.len()
    }

    /// The first value of `key` (Envoy's `getHeaderMapValue` returns `entry[0]`).
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        let key = key.to_ascii_lowercase();
        self.pairs
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `addCopy`: appends, keeping pseudo-headers ahead of the others.
    pub(crate) fn add(&mut self, key: &str, value: &str) {
        let key = key.to_ascii_lowercase();
        let at = if key.starts_with(':') {
            self.pairs
                .iter()
                .position(|(k, _)| !k.starts_with(':'))
                .unwrap_or(self.pairs.len())
        } else {
            self.pairs.len()
        };
        self.pairs.insert(at, (key, value.to_owned()));
    }

    /// `setCopy`: every value of `key` is removed, then the new one added.
    pub(crate) fn replace(&mut self, key: &str, value: &str) {
        self.remove(key);
        self.add(key, value);
    }

    pub(crate) fn remove(&mut self, key: &str) {
        let key = key.to_ascii_lowercase();
        self.pairs.retain(|(k, _)| *k != key);
    }

    /// `setHeaderMapPairs`: every header removed, then the given ones added.
    pub(crate) fn set_all(&mut self, pairs: &[(String, String)]) {
        self.pairs.clear();
        for (k, v) in pairs {
            self.add(k, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pseudo_headers_stay_first_and_keys_are_lower_cased() {
        let mut map = HeaderMap::from_pairs(&[("X-A", "1")]);
        map.add(":status", "200");
        assert_eq!(map.pairs()[0].0, ":status");
        assert_eq!(map.get("x-a"), Some("1"));
        map.replace("x-a", "2");
        map.add("x-a", "3");
        assert_eq!(map.get("X-A"), Some("2"));
        map.remove("x-a");
        assert_eq!(map.len(), 1);
    }
}
