//! The probe's and the library helper's `key=value` output.

/// The probe's `key=value` lines.
#[derive(Debug, Clone)]
pub struct Kv(pub Vec<(String, String)>);

impl Kv {
    pub fn parse(s: &str) -> Kv {
        Kv(s.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim_start_matches('\r').to_string(), v.trim_end_matches('\r').to_string()))
            .collect())
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    #[track_caller]
    pub fn must(&self, key: &str) -> &str {
        self.get(key).unwrap_or_else(|| panic!("probe output lacks `{key}`: {self:?}"))
    }

    pub fn with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.0.iter().filter(move |(k, _)| k.starts_with(prefix)).map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::Kv;

    #[test]
    fn last_value_wins_and_carriage_returns_go() {
        let kv = Kv::parse("a=1\r\nnoise\nb=x=y\na=2\n");
        assert_eq!(kv.get("a"), Some("2"));
        assert_eq!(kv.must("b"), "x=y");
        assert_eq!(kv.get("noise"), None);
        assert_eq!(kv.with_prefix("a").map(|(_, v)| v).collect::<Vec<_>>(), ["1", "2"]);
    }
}
