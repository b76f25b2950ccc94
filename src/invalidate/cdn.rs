//! An entry's tags as a CDN reads them (`cdn_tags`): one header value per configured header, in
//! the entry's order (broadest first: operation, fields, types, then entities), within the
//! CDN's limits. A tag a CDN could not take as it is (longer than a key may be, or holding a
//! character outside visible ASCII, or the header's separator) is left out rather than altered:
//! an altered tag would be purged by the wrong name.

use crate::config::{CdnHeader, CdnTags};

/// The header's value, and how many of the entry's tags it leaves out; `None` when no tag fits.
pub fn header_value(tags: &str, header: &CdnHeader, limits: &CdnTags) -> (Option<String>, usize) {
    let mut value = String::new();
    let mut left_out = 0;
    let mut full = false;
    for tag in tags.split(',').filter(|t| !t.is_empty()) {
        let fits = !full
            && tag.len() <= limits.max_tag_bytes
            && tag
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != header.separator as u8);
        let sep = usize::from(!value.is_empty());
        if fits && value.len() + sep + tag.len() <= limits.max_header_bytes {
            if sep == 1 {
                value.push(header.separator);
            }
            value.push_str(tag);
        } else {
            // Once the header is full, every later tag is left out (kept in order, not packed).
            full |= fits;
            left_out += 1;
        }
    }
    ((!value.is_empty()).then_some(value), left_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_header_bytes: usize, max_tag_bytes: usize) -> CdnTags {
        CdnTags {
            headers: Vec::new(),
            max_header_bytes,
            max_tag_bytes,
        }
    }

    fn header(name: &str, separator: char) -> CdnHeader {
        CdnHeader {
            name: name.into(),
            separator,
        }
    }

    #[test]
    fn fastly_and_cloudflare_syntax() {
        let tags = "operation:GetUser,field:user,type:User,entity:User:1";
        let l = limits(16384, 1024);
        assert_eq!(
            header_value(tags, &header("surrogate-key", ' '), &l),
            (
                Some("operation:GetUser field:user type:User entity:User:1".into()),
                0
            )
        );
        assert_eq!(
            header_value(tags, &header("cache-tag", ','), &l),
            (Some(tags.into()), 0)
        );
        assert_eq!(header_value("", &header("cache-tag", ','), &l), (None, 0));
    }

    #[test]
    fn limits_leave_tags_out_never_cut_them() {
        let sk = header("surrogate-key", ' ');
        // A tag longer than a key may be, or not sendable as it is.
        let (v, out) = header_value(
            "type:User,entity:User:a b,entity:User:é,x",
            &sk,
            &limits(100, 1024),
        );
        assert_eq!((v.as_deref(), out), (Some("type:User x"), 2));
        let long = format!("type:User,entity:User:{}", "9".repeat(2000));
        assert_eq!(
            header_value(&long, &sk, &limits(16384, 1024)),
            (Some("type:User".into()), 1)
        );
        // The header is full: the later tags are left out, the earlier kept whole.
        let (v, out) = header_value("aaaa,bbbb,cc,dd", &sk, &limits(9, 1024));
        assert_eq!((v.as_deref(), out), (Some("aaaa bbbb"), 2));
        let (v, out) = header_value("aaaaaaaaaa", &sk, &limits(9, 1024));
        assert_eq!((v, out), (None, 1));
    }
}
