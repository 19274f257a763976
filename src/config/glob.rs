//! Globs over names and paths: `*` any run of characters, `?` any one. Tool checks match tool
//! names with them, `pass_paths` request paths. Below both, so neither imports the other.

/// A name or path, or a glob over them: `*` any run of characters, `?` any one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob(String);

impl Glob {
    pub fn new(pattern: &str) -> Self {
        Self(pattern.to_owned())
    }

    /// `?` stands for one character: ASCII names (nearly all) are matched byte by byte where
    /// they lie, others as characters.
    pub fn matches(&self, name: &str) -> bool {
        if self.0.is_ascii() && name.is_ascii() {
            return wildcard(self.0.as_bytes(), name.as_bytes());
        }
        let pattern: Vec<char> = self.0.chars().collect();
        let name: Vec<char> = name.chars().collect();
        wildcard(&pattern, &name)
    }
}

/// Iterative wildcard matching with one backtrack point (the last `*`), over bytes or characters.
fn wildcard<T: Copy + PartialEq + From<u8>>(pattern: &[T], name: &[T]) -> bool {
    let (any, one) = (T::from(b'*'), T::from(b'?'));
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(&c) if c == any => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == one || Some(&c) == name.get(n) => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern
        .get(p..)
        .is_some_and(|rest| rest.iter().all(|&c| c == any))
}
