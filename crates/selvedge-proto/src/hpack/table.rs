//! The static table (RFC 7541 Appendix A), header-name [`Token`]s with their
//! reverse indices into it, and the decoder's dynamic table (RFC 7541 §2.3.2,
//! §4).

use std::collections::VecDeque;

use bytes::Bytes;

use super::ENTRY_OVERHEAD;

macro_rules! tokens {
    ($($variant:ident = $name:literal, $static_index:literal;)*) => {
        /// A well-known header name: every name in the static table, plus
        /// other names common in HTTP/2 requests and responses.
        ///
        /// Tokens are lower case, as HTTP/2 field names must be.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        #[non_exhaustive]
        pub enum Token {
            $(
                #[doc = concat!("`", $name, "`")]
                $variant,
            )*
        }

        impl Token {
            /// Every token, in declaration order (`ALL[t as usize] == t`).
            pub const ALL: &'static [Token] = &[$(Token::$variant),*];

            /// The header name.
            #[inline]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Token::$variant => $name,)*
                }
            }

            /// Index of the first static-table entry with this name, if any
            /// (the reverse index used by the encoder for name matches).
            #[inline]
            pub const fn static_index(self) -> Option<usize> {
                const INDEX: &[u8] = &[$($static_index),*];
                match INDEX[self as usize] {
                    0 => None,
                    i => Some(i as usize),
                }
            }
        }
    };
}

tokens! {
    Authority = ":authority", 1;
    Method = ":method", 2;
    Path = ":path", 4;
    Scheme = ":scheme", 6;
    Status = ":status", 8;
    AcceptCharset = "accept-charset", 15;
    AcceptEncoding = "accept-encoding", 16;
    AcceptLanguage = "accept-language", 17;
    AcceptRanges = "accept-ranges", 18;
    Accept = "accept", 19;
    AccessControlAllowOrigin = "access-control-allow-origin", 20;
    Age = "age", 21;
    Allow = "allow", 22;
    Authorization = "authorization", 23;
    CacheControl = "cache-control", 24;
    ContentDisposition = "content-disposition", 25;
    ContentEncoding = "content-encoding", 26;
    ContentLanguage = "content-language", 27;
    ContentLength = "content-length", 28;
    ContentLocation = "content-location", 29;
    ContentRange = "content-range", 30;
    ContentType = "content-type", 31;
    Cookie = "cookie", 32;
    Date = "date", 33;
    Etag = "etag", 34;
    Expect = "expect", 35;
    Expires = "expires", 36;
    From = "from", 37;
    Host = "host", 38;
    IfMatch = "if-match", 39;
    IfModifiedSince = "if-modified-since", 40;
    IfNoneMatch = "if-none-match", 41;
    IfRange = "if-range", 42;
    IfUnmodifiedSince = "if-unmodified-since", 43;
    LastModified = "last-modified", 44;
    Link = "link", 45;
    Location = "location", 46;
    MaxForwards = "max-forwards", 47;
    ProxyAuthenticate = "proxy-authenticate", 48;
    ProxyAuthorization = "proxy-authorization", 49;
    Range = "range", 50;
    Referer = "referer", 51;
    Refresh = "refresh", 52;
    RetryAfter = "retry-after", 53;
    Server = "server", 54;
    SetCookie = "set-cookie", 55;
    StrictTransportSecurity = "strict-transport-security", 56;
    TransferEncoding = "transfer-encoding", 57;
    UserAgent = "user-agent", 58;
    Vary = "vary", 59;
    Via = "via", 60;
    WwwAuthenticate = "www-authenticate", 61;
    Protocol = ":protocol", 0;
    AccessControlAllowCredentials = "access-control-allow-credentials", 0;
    AccessControlAllowHeaders = "access-control-allow-headers", 0;
    AccessControlAllowMethods = "access-control-allow-methods", 0;
    AccessControlExposeHeaders = "access-control-expose-headers", 0;
    AccessControlMaxAge = "access-control-max-age", 0;
    AccessControlRequestHeaders = "access-control-request-headers", 0;
    AccessControlRequestMethod = "access-control-request-method", 0;
    AltSvc = "alt-svc", 0;
    Connection = "connection", 0;
    ContentSecurityPolicy = "content-security-policy", 0;
    CrossOriginEmbedderPolicy = "cross-origin-embedder-policy", 0;
    CrossOriginOpenerPolicy = "cross-origin-opener-policy", 0;
    CrossOriginResourcePolicy = "cross-origin-resource-policy", 0;
    Dnt = "dnt", 0;
    EarlyData = "early-data", 0;
    Forwarded = "forwarded", 0;
    KeepAlive = "keep-alive", 0;
    Origin = "origin", 0;
    PermissionsPolicy = "permissions-policy", 0;
    Pragma = "pragma", 0;
    Priority = "priority", 0;
    ProxyConnection = "proxy-connection", 0;
    ReferrerPolicy = "referrer-policy", 0;
    SecChUa = "sec-ch-ua", 0;
    SecChUaMobile = "sec-ch-ua-mobile", 0;
    SecChUaPlatform = "sec-ch-ua-platform", 0;
    SecFetchDest = "sec-fetch-dest", 0;
    SecFetchMode = "sec-fetch-mode", 0;
    SecFetchSite = "sec-fetch-site", 0;
    SecFetchUser = "sec-fetch-user", 0;
    SecWebsocketExtensions = "sec-websocket-extensions", 0;
    SecWebsocketKey = "sec-websocket-key", 0;
    SecWebsocketProtocol = "sec-websocket-protocol", 0;
    SecWebsocketVersion = "sec-websocket-version", 0;
    ServerTiming = "server-timing", 0;
    Te = "te", 0;
    TimingAllowOrigin = "timing-allow-origin", 0;
    Trailer = "trailer", 0;
    Upgrade = "upgrade", 0;
    UpgradeInsecureRequests = "upgrade-insecure-requests", 0;
    XContentTypeOptions = "x-content-type-options", 0;
    XForwardedFor = "x-forwarded-for", 0;
    XForwardedHost = "x-forwarded-host", 0;
    XForwardedProto = "x-forwarded-proto", 0;
    XFrameOptions = "x-frame-options", 0;
    XPoweredBy = "x-powered-by", 0;
    XRequestedWith = "x-requested-with", 0;
    XXssProtection = "x-xss-protection", 0;
}

impl Token {
    /// The header name as bytes.
    #[inline]
    pub const fn as_bytes(self) -> &'static [u8] {
        self.as_str().as_bytes()
    }

    /// Whether this is a pseudo-header (`:method`, `:status`, ...).
    #[inline]
    pub const fn is_pseudo(self) -> bool {
        self.as_bytes()[0] == b':'
    }

    /// Looks a header name up: a match on the length, then on the bytes.
    ///
    /// The comparison is exact (HTTP/2 field names are lower case; an upper
    /// case name is not a token).
    #[inline]
    pub fn from_bytes(bytes: &[u8]) -> Option<Token> {
        match bytes.len() {
            2 => match bytes {
                b"te" => Some(Token::Te),
                _ => None,
            },
            3 => match bytes {
                b"age" => Some(Token::Age),
                b"dnt" => Some(Token::Dnt),
                b"via" => Some(Token::Via),
                _ => None,
            },
            4 => match bytes {
                b"date" => Some(Token::Date),
                b"etag" => Some(Token::Etag),
                b"from" => Some(Token::From),
                b"host" => Some(Token::Host),
                b"link" => Some(Token::Link),
                b"vary" => Some(Token::Vary),
                _ => None,
            },
            5 => match bytes {
                b":path" => Some(Token::Path),
                b"allow" => Some(Token::Allow),
                b"range" => Some(Token::Range),
                _ => None,
            },
            6 => match bytes {
                b"accept" => Some(Token::Accept),
                b"cookie" => Some(Token::Cookie),
                b"expect" => Some(Token::Expect),
                b"origin" => Some(Token::Origin),
                b"pragma" => Some(Token::Pragma),
                b"server" => Some(Token::Server),
                _ => None,
            },
            7 => match bytes {
                b":method" => Some(Token::Method),
                b":scheme" => Some(Token::Scheme),
                b":status" => Some(Token::Status),
                b"alt-svc" => Some(Token::AltSvc),
                b"expires" => Some(Token::Expires),
                b"referer" => Some(Token::Referer),
                b"refresh" => Some(Token::Refresh),
                b"trailer" => Some(Token::Trailer),
                b"upgrade" => Some(Token::Upgrade),
                _ => None,
            },
            8 => match bytes {
                b"if-match" => Some(Token::IfMatch),
                b"if-range" => Some(Token::IfRange),
                b"location" => Some(Token::Location),
                b"priority" => Some(Token::Priority),
                _ => None,
            },
            9 => match bytes {
                b":protocol" => Some(Token::Protocol),
                b"forwarded" => Some(Token::Forwarded),
                b"sec-ch-ua" => Some(Token::SecChUa),
                _ => None,
            },
            10 => match bytes {
                b":authority" => Some(Token::Authority),
                b"connection" => Some(Token::Connection),
                b"early-data" => Some(Token::EarlyData),
                b"keep-alive" => Some(Token::KeepAlive),
                b"set-cookie" => Some(Token::SetCookie),
                b"user-agent" => Some(Token::UserAgent),
                _ => None,
            },
            11 => match bytes {
                b"retry-after" => Some(Token::RetryAfter),
                _ => None,
            },
            12 => match bytes {
                b"content-type" => Some(Token::ContentType),
                b"max-forwards" => Some(Token::MaxForwards),
                b"x-powered-by" => Some(Token::XPoweredBy),
                _ => None,
            },
            13 => match bytes {
                b"accept-ranges" => Some(Token::AcceptRanges),
                b"authorization" => Some(Token::Authorization),
                b"cache-control" => Some(Token::CacheControl),
                b"content-range" => Some(Token::ContentRange),
                b"if-none-match" => Some(Token::IfNoneMatch),
                b"last-modified" => Some(Token::LastModified),
                b"server-timing" => Some(Token::ServerTiming),
                _ => None,
            },
            14 => match bytes {
                b"accept-charset" => Some(Token::AcceptCharset),
                b"content-length" => Some(Token::ContentLength),
                b"sec-fetch-dest" => Some(Token::SecFetchDest),
                b"sec-fetch-mode" => Some(Token::SecFetchMode),
                b"sec-fetch-site" => Some(Token::SecFetchSite),
                b"sec-fetch-user" => Some(Token::SecFetchUser),
                _ => None,
            },
            15 => match bytes {
                b"accept-encoding" => Some(Token::AcceptEncoding),
                b"accept-language" => Some(Token::AcceptLanguage),
                b"referrer-policy" => Some(Token::ReferrerPolicy),
                b"x-forwarded-for" => Some(Token::XForwardedFor),
                b"x-frame-options" => Some(Token::XFrameOptions),
                _ => None,
            },
            16 => match bytes {
                b"content-encoding" => Some(Token::ContentEncoding),
                b"content-language" => Some(Token::ContentLanguage),
                b"content-location" => Some(Token::ContentLocation),
                b"proxy-connection" => Some(Token::ProxyConnection),
                b"sec-ch-ua-mobile" => Some(Token::SecChUaMobile),
                b"www-authenticate" => Some(Token::WwwAuthenticate),
                b"x-forwarded-host" => Some(Token::XForwardedHost),
                b"x-requested-with" => Some(Token::XRequestedWith),
                b"x-xss-protection" => Some(Token::XXssProtection),
                _ => None,
            },
            17 => match bytes {
                b"if-modified-since" => Some(Token::IfModifiedSince),
                b"sec-websocket-key" => Some(Token::SecWebsocketKey),
                b"transfer-encoding" => Some(Token::TransferEncoding),
                b"x-forwarded-proto" => Some(Token::XForwardedProto),
                _ => None,
            },
            18 => match bytes {
                b"permissions-policy" => Some(Token::PermissionsPolicy),
                b"proxy-authenticate" => Some(Token::ProxyAuthenticate),
                b"sec-ch-ua-platform" => Some(Token::SecChUaPlatform),
                _ => None,
            },
            19 => match bytes {
                b"content-disposition" => Some(Token::ContentDisposition),
                b"if-unmodified-since" => Some(Token::IfUnmodifiedSince),
                b"proxy-authorization" => Some(Token::ProxyAuthorization),
                b"timing-allow-origin" => Some(Token::TimingAllowOrigin),
                _ => None,
            },
            21 => match bytes {
                b"sec-websocket-version" => Some(Token::SecWebsocketVersion),
                _ => None,
            },
            22 => match bytes {
                b"access-control-max-age" => Some(Token::AccessControlMaxAge),
                b"sec-websocket-protocol" => Some(Token::SecWebsocketProtocol),
                b"x-content-type-options" => Some(Token::XContentTypeOptions),
                _ => None,
            },
            23 => match bytes {
                b"content-security-policy" => Some(Token::ContentSecurityPolicy),
                _ => None,
            },
            24 => match bytes {
                b"sec-websocket-extensions" => Some(Token::SecWebsocketExtensions),
                _ => None,
            },
            25 => match bytes {
                b"strict-transport-security" => Some(Token::StrictTransportSecurity),
                b"upgrade-insecure-requests" => Some(Token::UpgradeInsecureRequests),
                _ => None,
            },
            26 => match bytes {
                b"cross-origin-opener-policy" => Some(Token::CrossOriginOpenerPolicy),
                _ => None,
            },
            27 => match bytes {
                b"access-control-allow-origin" => Some(Token::AccessControlAllowOrigin),
                _ => None,
            },
            28 => match bytes {
                b"access-control-allow-headers" => Some(Token::AccessControlAllowHeaders),
                b"access-control-allow-methods" => Some(Token::AccessControlAllowMethods),
                b"cross-origin-embedder-policy" => Some(Token::CrossOriginEmbedderPolicy),
                b"cross-origin-resource-policy" => Some(Token::CrossOriginResourcePolicy),
                _ => None,
            },
            29 => match bytes {
                b"access-control-expose-headers" => Some(Token::AccessControlExposeHeaders),
                b"access-control-request-method" => Some(Token::AccessControlRequestMethod),
                _ => None,
            },
            30 => match bytes {
                b"access-control-request-headers" => Some(Token::AccessControlRequestHeaders),
                _ => None,
            },
            32 => match bytes {
                b"access-control-allow-credentials" => Some(Token::AccessControlAllowCredentials),
                _ => None,
            },
            _ => None,
        }
    }

    /// Index of the static-table entry with exactly this name and `value`,
    /// if any (the encoder's full-match reverse index).
    #[inline]
    pub fn static_full_index(self, value: &[u8]) -> Option<usize> {
        let index = match (self, value) {
            (Token::Method, b"GET") => 2,
            (Token::Method, b"POST") => 3,
            (Token::Path, b"/") => 4,
            (Token::Path, b"/index.html") => 5,
            (Token::Scheme, b"http") => 6,
            (Token::Scheme, b"https") => 7,
            (Token::Status, b"200") => 8,
            (Token::Status, b"204") => 9,
            (Token::Status, b"206") => 10,
            (Token::Status, b"304") => 11,
            (Token::Status, b"400") => 12,
            (Token::Status, b"404") => 13,
            (Token::Status, b"500") => 14,
            (Token::AcceptEncoding, b"gzip, deflate") => 16,
            (t, b"") => match t.static_index() {
                // Every static entry from 15 on has an empty value, except 16.
                Some(i) if i >= 15 && i != 16 => i,
                Some(1) => 1,
                _ => return None,
            },
            _ => return None,
        };
        Some(index)
    }
}

/// The static table (RFC 7541 Appendix A); entry `i` (1-based in HPACK) is
/// `STATIC_TABLE[i - 1]`.
pub const STATIC_TABLE: [(Token, &str); 61] = [
    (Token::Authority, ""),
    (Token::Method, "GET"),
    (Token::Method, "POST"),
    (Token::Path, "/"),
    (Token::Path, "/index.html"),
    (Token::Scheme, "http"),
    (Token::Scheme, "https"),
    (Token::Status, "200"),
    (Token::Status, "204"),
    (Token::Status, "206"),
    (Token::Status, "304"),
    (Token::Status, "400"),
    (Token::Status, "404"),
    (Token::Status, "500"),
    (Token::AcceptCharset, ""),
    (Token::AcceptEncoding, "gzip, deflate"),
    (Token::AcceptLanguage, ""),
    (Token::AcceptRanges, ""),
    (Token::Accept, ""),
    (Token::AccessControlAllowOrigin, ""),
    (Token::Age, ""),
    (Token::Allow, ""),
    (Token::Authorization, ""),
    (Token::CacheControl, ""),
    (Token::ContentDisposition, ""),
    (Token::ContentEncoding, ""),
    (Token::ContentLanguage, ""),
    (Token::ContentLength, ""),
    (Token::ContentLocation, ""),
    (Token::ContentRange, ""),
    (Token::ContentType, ""),
    (Token::Cookie, ""),
    (Token::Date, ""),
    (Token::Etag, ""),
    (Token::Expect, ""),
    (Token::Expires, ""),
    (Token::From, ""),
    (Token::Host, ""),
    (Token::IfMatch, ""),
    (Token::IfModifiedSince, ""),
    (Token::IfNoneMatch, ""),
    (Token::IfRange, ""),
    (Token::IfUnmodifiedSince, ""),
    (Token::LastModified, ""),
    (Token::Link, ""),
    (Token::Location, ""),
    (Token::MaxForwards, ""),
    (Token::ProxyAuthenticate, ""),
    (Token::ProxyAuthorization, ""),
    (Token::Range, ""),
    (Token::Referer, ""),
    (Token::Refresh, ""),
    (Token::RetryAfter, ""),
    (Token::Server, ""),
    (Token::SetCookie, ""),
    (Token::StrictTransportSecurity, ""),
    (Token::TransferEncoding, ""),
    (Token::UserAgent, ""),
    (Token::Vary, ""),
    (Token::Via, ""),
    (Token::WwwAuthenticate, ""),
];

/// Number of entries in the static table; dynamic indices start after it.
pub const STATIC_LEN: usize = STATIC_TABLE.len();

/// One dynamic-table entry on the decoding side. The name is kept only
/// when it is not a [`Token`].
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    token: Option<Token>,
    name: Bytes,
    value: Bytes,
}

impl Entry {
    /// `name` is ignored (and should be empty) when `token` is set.
    pub(crate) fn new(token: Option<Token>, name: Bytes, value: Bytes) -> Entry {
        debug_assert!(token.is_none() || name.is_empty());
        Entry { token, name, value }
    }

    #[inline]
    pub(crate) fn token(&self) -> Option<Token> {
        self.token
    }

    #[inline]
    pub(crate) fn name_bytes(&self) -> &[u8] {
        match self.token {
            Some(t) => t.as_bytes(),
            None => &self.name,
        }
    }

    /// The stored name (empty when the name is a token).
    #[inline]
    pub(crate) fn name(&self) -> &Bytes {
        &self.name
    }

    #[inline]
    pub(crate) fn value(&self) -> &Bytes {
        &self.value
    }

    /// Size of the entry as counted by RFC 7541 §4.1.
    #[inline]
    pub(crate) fn size(&self) -> usize {
        self.name_bytes().len() + self.value.len() + ENTRY_OVERHEAD
    }
}

/// The decoder's dynamic table: a ring buffer, newest entry at the front.
#[derive(Debug)]
pub(crate) struct DynamicTable {
    entries: VecDeque<Entry>,
    size: usize,
    max_size: usize,
}

impl DynamicTable {
    pub(crate) fn new(max_size: usize) -> DynamicTable {
        DynamicTable { entries: VecDeque::new(), size: 0, max_size }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    #[inline]
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    #[inline]
    pub(crate) fn max_size(&self) -> usize {
        self.max_size
    }

    /// Entry `i`, 0 being the most recently inserted (HPACK index
    /// `STATIC_LEN + 1 + i`).
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&Entry> {
        self.entries.get(i)
    }

    /// Applies a dynamic table size update, evicting as needed.
    pub(crate) fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    /// Inserts an entry, evicting old ones to make room; an entry larger
    /// than the whole table empties it and is not inserted (RFC 7541 §4.4).
    pub(crate) fn insert(&mut self, entry: Entry) {
        let size = entry.size();
        if size > self.max_size {
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max_size - size);
        self.size += size;
        self.entries.push_front(entry);
    }

    fn evict_to(&mut self, target: usize) {
        while self.size > target {
            match self.entries.pop_back() {
                Some(e) => self.size -= e.size(),
                None => {
                    self.size = 0;
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_lookup_round_trips() {
        for (i, &t) in Token::ALL.iter().enumerate() {
            assert_eq!(t as usize, i);
            assert_eq!(Token::from_bytes(t.as_bytes()), Some(t), "{}", t.as_str());
            assert_eq!(t.as_str().to_ascii_lowercase(), t.as_str());
            assert_eq!(t.is_pseudo(), t.as_str().starts_with(':'));
        }
        let mut names: Vec<_> = Token::ALL.iter().map(|t| t.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Token::ALL.len(), "duplicate token names");
    }

    #[test]
    fn non_tokens() {
        for name in [
            &b""[..],
            b"x",
            b"Te",
            b"Content-Type",
            b"content-typ",
            b"content-typex",
            b":statux",
            b"custom-key",
            b"x-forwarded-fo",
            b"\xff\xfe",
        ] {
            assert_eq!(Token::from_bytes(name), None, "{name:?}");
        }
    }

    #[test]
    fn static_table_reverse_indices() {
        for (i, &(t, value)) in STATIC_TABLE.iter().enumerate() {
            let index = i + 1;
            // The name index points at the first entry with that name.
            let first = STATIC_TABLE.iter().position(|&(u, _)| u == t).unwrap() + 1;
            assert_eq!(t.static_index(), Some(first), "{}", t.as_str());
            assert_eq!(t.static_full_index(value.as_bytes()), Some(index), "{index}");
        }
        // Tokens outside the static table have no index.
        for &t in Token::ALL {
            if !STATIC_TABLE.iter().any(|&(u, _)| u == t) {
                assert_eq!(t.static_index(), None, "{}", t.as_str());
                assert_eq!(t.static_full_index(b""), None);
            }
        }
        assert_eq!(Token::Status.static_full_index(b"201"), None);
        assert_eq!(Token::Method.static_full_index(b""), None);
        assert_eq!(Token::AcceptEncoding.static_full_index(b""), None);
        assert_eq!(Token::Path.static_full_index(b"/index.htm"), None);
        assert_eq!(STATIC_LEN, 61);
        assert_eq!(Token::WwwAuthenticate.static_index(), Some(61));
    }

    fn entry(name: &str, value: &str) -> Entry {
        let token = Token::from_bytes(name.as_bytes());
        let name = match token {
            Some(_) => Bytes::new(),
            None => Bytes::copy_from_slice(name.as_bytes()),
        };
        Entry::new(token, name, Bytes::copy_from_slice(value.as_bytes()))
    }

    #[test]
    fn entry_accessors() {
        let e = entry("custom-key", "custom-value");
        assert_eq!(e.token(), None);
        assert_eq!(e.name_bytes(), b"custom-key");
        assert_eq!(&e.name()[..], b"custom-key");
        assert_eq!(&e.value()[..], b"custom-value");
        assert_eq!(e.size(), 10 + 12 + 32);
        let e = entry(":authority", "www.example.com");
        assert_eq!(e.token(), Some(Token::Authority));
        assert_eq!(e.name_bytes(), b":authority");
        assert!(e.name().is_empty());
        assert_eq!(&e.value()[..], b"www.example.com");
        assert_eq!(e.size(), 57);
    }

    #[test]
    fn dynamic_table_eviction() {
        let mut t = DynamicTable::new(100);
        t.insert(entry("a", "1")); // 34
        t.insert(entry("b", "2")); // 34
        assert_eq!((t.len(), t.size()), (2, 68));
        t.insert(entry("c", "3")); // evicts "a"
        assert_eq!((t.len(), t.size()), (2, 68));
        assert_eq!(t.get(0).unwrap().name_bytes(), b"c");
        assert_eq!(t.get(1).unwrap().name_bytes(), b"b");
        assert!(t.get(2).is_none());
        t.set_max_size(40);
        assert_eq!((t.len(), t.size()), (1, 34));
        // Too big for the table: empties it.
        t.insert(entry("name", "a-value-longer-than-the-table"));
        assert_eq!((t.len(), t.size()), (0, 0));
        t.set_max_size(0);
        t.insert(entry("a", ""));
        assert_eq!(t.len(), 0);
        t.set_max_size(4096);
        assert_eq!(t.max_size(), 4096);
    }
}
