//! How Envoy edits a body buffer for `proxy_set_buffer_bytes`.

use crate::abi::status;

/// Envoy's `Buffer::copyFrom` (`source/extensions/common/wasm/context.cc`): at start 0 the
/// first `length` bytes are drained and the data prepended (so `length >= len` replaces all and
/// `length == 0` prepends); at a start at or past the end the data is appended; any other start
/// is `BadArgument`.
pub(crate) fn copy_from(buffer: &mut Vec<u8>, start: usize, length: usize, data: &[u8]) -> i32 {
    if start == 0 {
        let drained = length.min(buffer.len());
        buffer.splice(..drained, data.iter().copied());
        status::OK
    } else if start >= buffer.len() {
        buffer.extend_from_slice(data);
        status::OK
    } else {
        status::BAD_ARGUMENT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_zero_with_full_length_replaces_everything() {
        let mut b = b"hello".to_vec();
        assert_eq!(copy_from(&mut b, 0, 5, b"bye"), status::OK);
        assert_eq!(b, b"bye");
    }

    #[test]
    fn start_zero_with_zero_length_prepends() {
        let mut b = b"world".to_vec();
        assert_eq!(copy_from(&mut b, 0, 0, b"hello "), status::OK);
        assert_eq!(b, b"hello world");
    }

    #[test]
    fn start_zero_with_short_length_replaces_the_prefix() {
        let mut b = b"hello world".to_vec();
        assert_eq!(copy_from(&mut b, 0, 5, b"HOWDY"), status::OK);
        assert_eq!(b, b"HOWDY world");
    }

    #[test]
    fn start_at_the_end_appends() {
        let mut b = b"abc".to_vec();
        assert_eq!(copy_from(&mut b, 3, 0, b"def"), status::OK);
        assert_eq!(copy_from(&mut b, 100, 7, b"!"), status::OK);
        assert_eq!(b, b"abcdef!");
    }

    #[test]
    fn start_in_the_middle_is_bad_argument() {
        let mut b = b"abcdef".to_vec();
        assert_eq!(copy_from(&mut b, 2, 1, b"x"), status::BAD_ARGUMENT);
        assert_eq!(b, b"abcdef");
    }
}
