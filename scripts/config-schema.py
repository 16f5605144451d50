#!/usr/bin/env python3
"""Writes crates/selvedge-server/src/config/schema.json, the JSON Schema of the configuration file
(`selvedge config schema` prints it). Run it after changing a configuration key: it is the one
place the schema is written (tests/schema.rs checks that the file is its output)."""
import json
import re
import sys

U32 = 4294967295
I32 = 2147483647
MAX_DUR = 100 * 365 * 86400  # units::MAX_DURATION, in seconds

# ${NAME} / ${NAME:-default}: substituted before parsing (config/substitute.rs).
ENV = r"\$\{[A-Z_][A-Z0-9_]*(?::-[^}]*)?\}"


def dotall(regex):
    """`.*` and `.+` as `[\\s\\S]*` and `[\\s\\S]+`: any character, newlines included (the
    parsers take them), in every regex dialect."""
    return re.sub(r"(?<!\\)\.([*+])", r"[\\s\\S]\1", regex)


def pat(regex):
    """A pattern: the whole string matches `regex`, or it holds an env reference."""
    return f"^(?:{dotall(regex)})$|{ENV}"


def ci(word):
    """`word`, case-insensitively, without inline flags (portable to ECMA-262)."""
    out = []
    for c in word:
        if c.isalpha():
            out.append(f"[{c.lower()}{c.upper()}]")
        elif c in ".+*?()[]{}^$|\\":
            out.append("\\" + c)
        else:
            out.append(c)
    return "".join(out)


NUM = r"[0-9]+\.?[0-9]*|\.[0-9]+"
DUR_UNIT = r"ms|s|m|h|d"
# units::parse_duration: trimmed; a bare number (seconds), or number+unit parts.
DUR = rf"\s*(?:(?:{NUM})|(?:(?:{NUM})\s*(?:{DUR_UNIT})\s*)+)\s*"
ZNUM = r"0+\.?0*|\.0+"
ZERO_DUR = rf"^\s*(?:(?:{ZNUM})|(?:(?:{ZNUM})\s*(?:{DUR_UNIT})\s*)+)\s*$"
# units::parse_size: a number, then optionally (after spaces) a case-insensitive unit.
SIZE = rf"\s*(?:{NUM})\s*(?:[bB]|[kKmMgGtT][iI]?[bB])?\s*"
# Rust's SocketAddr (IPv4:port, [IPv6]:port) or unix:PATH.
SOCKADDR = r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}:[0-9]+|\[[0-9A-Za-z:.%]+\]:[0-9]+"
LISTEN_ADDR = rf"unix:.+|{SOCKADDR}"
IP = r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*"
NET = rf"\s*(?:{IP})(?:/[0-9]{{1,3}})?\s*"
TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"


def ref(name, **extra):
    d = {"$ref": f"#/$defs/{name}"}
    d.update(extra)
    return d


def desc(schema, text):
    schema = dict(schema)
    schema["description"] = text
    return schema


def dur(text, nonzero=False):
    return ref("nonZeroDuration" if nonzero else "duration", description=text)


def lt(n):
    """A regex of the decimal integers (without leading zeros) below n (n >= 1)."""
    digits = str(n)
    k = len(digits)
    alts = []
    if k >= 2:
        alts.append("[1-9][0-9]{0,%d}" % (k - 2) if k > 2 else "[1-9]")
    for i, d in enumerate(digits):
        low = 1 if i == 0 else 0
        if int(d) > low:
            rng = f"[{low}-{int(d) - 1}]" if int(d) - 1 > low else f"{low}"
            rest = k - i - 1
            alts.append(digits[:i] + rng + (f"[0-9]{{{rest}}}" if rest else ""))
    return "|".join(alts)


def size(text, lo=None, hi=None):
    d = ref("size", description=text)
    if lo:
        d["minimum"] = lo
        if lo == 1:
            # Zero, in any unit.
            d["not"] = {"description": "zero, where the size must be at least 1 byte", "type": "string",
                        "pattern": rf"^\s*(?:{ZNUM})\s*(?:[bB]|[kKmMgGtT][iI]?[bB])?\s*$"}
        else:
            # A number of bytes (bare or with B) below the minimum.
            d["not"] = {"description": f"a size below the minimum, {lo} bytes", "type": "string",
                        "pattern": rf"^\s*0*(?:{lt(lo)})?(?:\.[0-9]*)?\s*[bB]?\s*$"}
    if hi is not None:
        d["maximum"] = hi
    return d


def count(text, lo=None, hi=None):
    d = ref("count", description=text)
    if lo:
        d["minimum"] = lo
    if hi is not None:
        d["maximum"] = hi
    return d


def boolean(text):
    return {"type": "boolean", "description": text}


def string(text, pattern=None, **kw):
    d = {"type": "string", "description": text}
    if pattern:
        d["pattern"] = pat(pattern)
    d.update(kw)
    return d


def strings(text, item=None, **kw):
    d = {"type": "array", "description": text, "items": item or {"type": "string"}}
    d.update(kw)
    return d


def enum_ci(text, words):
    return string(text, "|".join(ci(w) for w in words))


def enum(text, words):
    return {"description": text, "anyOf": [{"type": "string", "enum": words}, ref("envString")]}


def table(text, props, required=(), **kw):
    d = {"type": "object", "description": text, "properties": props, "additionalProperties": False}
    if required:
        d["required"] = list(required)
    d.update(kw)
    return d


def string_map(text, value=None, **kw):
    d = {"type": "object", "description": text, "additionalProperties": value or {"type": "string"}}
    d.update(kw)
    return d


defs = {}
DUR_TITLE = "a duration (\"250ms\", \"30s\", \"5m\", \"1h30m\", \"2d\", or a number of seconds)"

# ---------------------------------------------------------------- shared shapes
defs["envString"] = {
    "description": "A string holding a ${NAME} or ${NAME:-default} environment reference, "
    "substituted before the file is parsed.",
    "type": "string",
    "pattern": ENV,
}
defs["duration"] = {
    "description": "A duration: \"250ms\", \"30s\", \"5m\", \"1h\", \"2d\", combined (\"1h30m\") or with a "
    "fraction (\"1.5s\"); a bare number (integer, float or a string without a unit) is seconds. "
    "At most 100 years, never negative.",
    "anyOf": [
        {"type": "number", "minimum": 0, "maximum": MAX_DUR},
        {"type": "string", "pattern": pat(DUR), "title": DUR_TITLE},
    ],
}
defs["nonZeroDuration"] = {
    "description": "A duration greater than zero (see duration).",
    "anyOf": [
        {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_DUR},
        {"type": "string", "pattern": pat(DUR), "title": DUR_TITLE,
         "not": {"description": "a zero duration, where it must be greater than 0", "pattern": ZERO_DUR}},
    ],
}
defs["size"] = {
    "description": "A size in bytes: an integer, or a string with an optional unit: \"512\", \"512B\", "
    "\"64KiB\", \"10MiB\", \"1GiB\", \"1TiB\" (powers of 1024), \"64KB\", \"10MB\", \"1GB\", \"1TB\" "
    "(powers of 1000); units are case-insensitive and may follow a space; \"1.5KiB\" is 1536 bytes. "
    "A key's range (minimum/maximum) is checked here on integers only.",
    "anyOf": [
        {"type": "integer", "minimum": 0},
        {"type": "string", "pattern": pat(SIZE),
         "title": "a size (\"512\", \"512B\", \"64KiB\", \"10MiB\", \"1GB\"...)"},
    ],
}
defs["count"] = {"description": "A whole number (a TOML integer, not a string).", "type": "integer", "minimum": 0}
defs["oneOrMany"] = {
    "description": "One string, or a list of them (any of them).",
    "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
}
defs["listenAddress"] = {
    "description": "\"IP:PORT\" (\"0.0.0.0:80\", \"[::]:443\", \"127.0.0.1:8080\") or \"unix:PATH\" "
    "(a Unix-domain socket; relative to the file's directory).",
    "title": "an address (\"IP:PORT\", \"[IPv6]:PORT\" or \"unix:PATH\")",
    "type": "string",
    "pattern": pat(LISTEN_ADDR),
}
defs["network"] = {
    "description": "An IP address or a CIDR network (\"10.0.0.0/8\", \"::1\"); no bits set after the prefix.",
    "title": "an IP address or a network (\"10.0.0.0/8\", \"::1\")",
    "type": "string",
    "pattern": pat(NET),
}
defs["networks"] = {"description": "IP addresses or CIDR networks.", "type": "array", "items": ref("network")}
FRAMING = ["content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer", "keep-alive"]
ENGINE_FIELDS = FRAMING + ["date", "server"]


def refused_names(desc_, regex):
    return {"not": {"description": desc_, "pattern": regex}}


defs["headerFields"] = {
    "description": "Response fields: \"Name\" = \"value\" sets (replacing one of the same name), "
    "\"-Name\" = \"\" removes. Fields the server writes itself (Content-Length, Date, Server...) "
    "are refused.",
    "type": "object",
    "patternProperties": {"^-": {"type": "string", "maxLength": 0}},
    "additionalProperties": {"type": "string"},
    "propertyNames": refused_names("a field the server writes itself",
                                   "^-?(?:" + "|".join(ci(f) for f in ENGINE_FIELDS) + ")$"),
}
defs["headerOp"] = {
    "description": "A value (a template), or a search and replace on each value.",
    "anyOf": [
        {"type": "string"},
        {
            "type": "object",
            "properties": {
                "search": {"type": "string", "description": "A regular expression (Rust regex)."},
                "replace": {"type": "string", "description": "What each match becomes ($1, ${name})."},
            },
            "required": ["search", "replace"],
        },
    ],
}
defs["headerOps"] = {
    "description": "Field operations: \"Name\" = \"value\" replaces, \"+Name\" = \"value\" adds, "
    "\"-Name\" = \"\" deletes (\"-X-Debug-*\" = \"\" every name with the prefix), "
    "\"Name\" = { search = \"regex\", replace = \"$1\" } rewrites each value. Values are templates. "
    "Framing fields (Content-Length, Transfer-Encoding, Connection, Upgrade, TE, Trailer, "
    "Keep-Alive) cannot be touched.",
    "type": "object",
    "patternProperties": {"^-": {"type": "string", "maxLength": 0}},
    "additionalProperties": ref("headerOp"),
    "propertyNames": refused_names("a field that frames the message",
                                   "^[+-]?(?:" + "|".join(ci(f) for f in FRAMING) + ")$"),
}

# ---------------------------------------------------------------- matchers
one_or_many = lambda text: ref("oneOrMany", description=text)  # noqa: E731
PROTOCOLS = ["http", "https", "tls", "http/1.0", "http/1.1", "h2", "http/2", "h3", "http/3"]
defs["matcher"] = {
    "description": "A matcher: conditions on a request, all of which must hold; a condition given a "
    "list holds when one of its values does. At least one condition.",
    "type": "object",
    "minProperties": 1,
    "additionalProperties": False,
    "properties": {
        "method": {
            "description": "Method names in upper case (\"POST\"), compared in any case.",
            "anyOf": [
                {"type": "string", "pattern": pat("[A-Z-]+")},
                {"type": "array", "items": {"type": "string", "pattern": pat("[A-Z-]+")}},
            ],
        },
        "path": {
            "description": "Exact paths or globs where * is any run of bytes (\"/api/*\", \"*.php\"); "
            "each starts with '/' or '*'.",
            "anyOf": [
                {"type": "string", "pattern": pat(r"[/*].*")},
                {"type": "array", "items": {"type": "string", "pattern": pat(r"[/*].*")}},
            ],
        },
        "path_prefix": one_or_many("Path prefixes, matched on whole segments as route paths are."),
        "path_regex": string("A regular expression on the normalized path; its captures are "
                             "placeholders ({re.NAME.1})."),
        "host": one_or_many("Host names, or \"*.example.com\" (one label); without port."),
        "host_regex": string("A regular expression on the host (lower case, without port)."),
        "header": string_map("{ \"Name\" = \"glob\" }: a field of that name has a value matching the "
                             "glob (\"*\": present); a list: any.", ref("oneOrMany")),
        "header_regex": string_map("{ \"Name\" = \"expression\" }: a field of that name matches."),
        "query": string_map("{ \"key\" = \"glob\" }: the query has the key with a (decoded) value "
                            "matching the glob (\"*\": present).", ref("oneOrMany")),
        "cookie": string_map("{ \"name\" = \"glob\" }: a cookie of that name has a value matching the "
                             "glob (\"*\": present).", ref("oneOrMany")),
        "remote_ip": {
            "description": "Networks the connection's peer is in.",
            "anyOf": [ref("network"), ref("networks")],
        },
        "client_ip": {
            "description": "Networks the client (after [server] trusted_proxies) is in.",
            "anyOf": [ref("network"), ref("networks")],
        },
        "protocol": {
            "description": "\"http\", \"https\", \"http/1.0\", \"http/1.1\", \"h2\" or \"h3\" (any case), "
            "or a list.",
            "anyOf": [
                {"type": "string", "pattern": pat("|".join(ci(p) for p in PROTOCOLS))},
                {"type": "array",
                 "items": {"type": "string", "pattern": pat("|".join(ci(p) for p in PROTOCOLS))}},
            ],
        },
        "not": ref("matcher", description="Holds when the conditions inside do not all hold."),
    },
}
defs["match"] = {
    "description": "Matchers of which one must hold: a [vhost.matchers] name, a list of names, or a "
    "matcher table written in place.",
    "anyOf": [
        {"type": "string"},
        {"type": "array", "items": {"type": "string"}, "minItems": 1},
        ref("matcher"),
    ],
}

# ---------------------------------------------------------------- [server]
server = table(
    "The process and the connection-level settings.",
    {
        "workers": count("Worker threads (1-4096); default one per core.", 1, 4096),
        "pid_file": string("File holding the process id, written at start, removed at exit."),
        "hsts": string("Strict-Transport-Security value added to responses over TLS; default none."),
        "server_tokens": boolean("false: responses carry no Server field. Default true."),
        "backlog": count("Listen backlog of each listening socket; default 1024.", 1, I32),
        "user": string("After binding the listeners, run as this user (name or uid); needs root."),
        "group": string("Group to run as (name or gid); default the user's primary group."),
        "max_connections_per_ip": count("Connections served at once from one client address; "
                                        "default no limit.", 1, U32),
        "trusted_proxies": strings("Peers (addresses, networks, or \"unix\") whose client_ip_header "
                                   "names the client. Default [].",
                                   {"anyOf": [{"const": "unix"}, ref("network")]}),
        "client_ip_header": enum_ci("The field trusted proxies write the client in: \"x-forwarded-for\" "
                                    "(default), \"forwarded\" or \"x-real-ip\" (any case).",
                                    ["x-forwarded-for", "forwarded", "x-real-ip"]),
        "resolver": strings("DNS servers (\"IP\" or \"IP:PORT\", port 53 by default) asked for proxy "
                            "upstream names; default the system's.",
                            {"type": "string", "pattern": pat(rf"{IP}|{SOCKADDR}")}),
        "release_startup_code": boolean("Unmap the code pages only start-up used, after start and each "
                                        "reload. Default true."),
        "release_memory_after": count("Connections served at once that make a burst, after which free "
                                      "heap memory is given back to the system; 0 never. Default 256.",
                                      0, U32),
        "io": enum("How workers do their connections' I/O: \"epoll\" (default), \"uring\" (io_uring, "
                   "epoll where the kernel refuses it) or \"auto\".", ["epoll", "uring", "auto"]),
    },
)

# ---------------------------------------------------------------- [[listen]]
defs["listen"] = table(
    "A listener: `address`, or `host` and `port`.",
    {
        "address": ref("listenAddress", description="\"IP:PORT\" or \"unix:PATH\" (not with host/port)."),
        "host": string("The older form: an IP address (default 127.0.0.1), with `port`.", IP),
        "port": {"type": "integer", "minimum": 0, "maximum": 65535,
                 "description": "The older form: the port (with `host`)."},
        "tls": table(
            "A TLS listener (HTTP/2 by ALPN, else HTTP/1.1) with this default certificate; {} for none "
            "(only the virtual hosts' certificates).",
            {
                "cert": string("PEM certificate chain of the default certificate."),
                "key": string("PEM private key of the default certificate."),
                "strict_sni": boolean("Refuse handshakes naming an unknown host. Default false."),
            },
            dependentRequired={"cert": ["key"], "key": ["cert"]},
        ),
        "redirect_https": boolean("Only answer 301 to https:// (same host and path). Default false."),
        "quic": boolean("With tls, on a TCP address: also serve HTTP/3 over QUIC on the same UDP port. "
                        "Default false."),
        "proxy_protocol": boolean("Every connection starts with a PROXY protocol header (v1 or v2). "
                                  "Default false; needs proxy_protocol_from."),
        "proxy_protocol_from": ref("networks", description="Networks of the balancers whose PROXY header "
                                   "is believed (with proxy_protocol = true)."),
        "reuse_port": boolean("Share the address with other processes listening on it. Default false."),
        "on_demand": table(
            "On-demand TLS: names no certificate covers get one from the ACME CA during their first "
            "handshake, if ask allows (needs tls without a default certificate).",
            {
                "ask": string("GET ASK?domain=NAME must answer 200 for NAME to get a certificate.",
                              r"\s*https?://.*"),
                "rate": count("At most this many new certificates ordered per `per`. Default 10.", 1, 4294967295),
                "per": dur("The window of `rate`. Default \"1m\".", True),
                "max_certificates": count("At most this many certificates obtained on demand. Default 10000.",
                                          1, 4294967295),
            },
            required=["ask"],
        ),
    },
    anyOf=[
        {"required": ["address"], "not": {"description": "`address` with `host`/`port`: one or the other",
                                          "anyOf": [{"required": ["host"]}, {"required": ["port"]}]}},
        {"required": ["port"], "not": {"required": ["address"]}},
    ],
    allOf=[
        {"if": {"required": ["quic"], "properties": {"quic": {"const": True}}},
         "then": {"required": ["tls"]}},
        {"if": {"required": ["tls"]},
         "then": {"properties": {"redirect_https": {"const": False}}}},
        {"if": {"required": ["proxy_protocol"], "properties": {"proxy_protocol": {"const": True}}},
         "then": {"required": ["proxy_protocol_from"]}},
    ],
    dependentSchemas={
        "proxy_protocol_from": {"required": ["proxy_protocol"],
                                "properties": {"proxy_protocol": {"const": True}}},
    },
)

# ---------------------------------------------------------------- engine sections
timeouts = table(
    "Connection timeouts.",
    {
        "header": dur("Whole request head, from its first byte. Default \"10s\".", True),
        "idle": dur("An idle keep-alive connection. Default \"60s\".", True),
        "body": dur("Without an adequate request body read. Default \"30s\".", True),
        "send": dur("A write making no progress. Default \"30s\".", True),
        "linger": dur("A closing connection keeps reading and discarding this long. Default \"2s\"."),
        "tls_handshake": dur("A TLS handshake. Default \"10s\".", True),
        "graceful": dur("Shutdown waits this long for in-flight requests. Default \"30s\"."),
    },
)
limits = table(
    "Request and connection limits.",
    {
        "max_connections": count("Connections served at once. Default 10000.", 1, U32),
        "max_body": size("Largest request body (413). Default \"1GiB\"."),
        "max_head": size("Largest request head (431). Default \"16KiB\".", 256, U32),
        "max_headers": count("Most header lines (431). Default 100.", 1, 65535),
        "max_target": size("Longest request-target (414). Default \"8KiB\".", 16, U32),
        "max_chunk_ext": size("Chunk extensions of one chunk (400). Default \"1KiB\".", 0, U32),
        "max_trailers": size("Trailer section (400). Default \"8KiB\".", 0, U32),
        "max_drain": size("Unread request body discarded to keep a connection alive. Default \"256KiB\"."),
        "min_body_rate": size("Bytes per second a request body must average. Default \"256B\"."),
        "body_rate_grace": dur("A request body's rate credit at its start. Default \"2s\"."),
        "read_buffer": size("Initial receive buffer of a connection. Default \"4KiB\".", 512, 16 << 20),
        "notsent_lowat": size("TCP_NOTSENT_LOWAT on TCP listeners; 0 keeps the kernel's. "
                              "Default \"128KiB\".", 0, U32),
    },
)
http2 = table(
    "HTTP/2 settings and limits.",
    {
        "max_concurrent_streams": count("SETTINGS_MAX_CONCURRENT_STREAMS. Default 100.", 1, U32),
        "initial_window_size": size("SETTINGS_INITIAL_WINDOW_SIZE. Default 65535.", 0, (1 << 31) - 1),
        "connection_window": size("The connection's receive window. Default \"1MiB\".", 65535, (1 << 31) - 1),
        "max_frame_size": size("SETTINGS_MAX_FRAME_SIZE. Default 16384.", 16384, (1 << 24) - 1),
        "max_header_list_size": size("SETTINGS_MAX_HEADER_LIST_SIZE. Default \"64KiB\".", 1, U32),
        "header_table_size": size("HPACK table size for the decoder. Default 4096.", 0, U32),
        "max_continuation_frames": count("CONTINUATION frames in one header block. Default 64.", 1, U32),
        "abuse_window": dur("The period the abuse counters are counted over. Default \"10s\".", True),
        "max_peer_resets": count("Streams the client may reset per window. Default 1000.", 0, U32),
        "max_local_resets": count("Stream errors the client may provoke per window. Default 100.", 0, U32),
        "max_refused_headers": count("Request header blocks refused per window. Default 8.", 0, U32),
        "max_control_frames": count("SETTINGS/PING/PRIORITY frames per window. Default 10000.", 0, U32),
        "max_empty_frames": count("Empty DATA/HEADERS/CONTINUATION frames per window. Default 100.", 0, U32),
        "max_control_queue": size("Control frames queued but unwritten. Default \"64KiB\".", 1024, U32),
        "max_requests": count("Requests per connection before a graceful GOAWAY. Default unlimited.", 1, U32),
        "stream_buffer": size("Bytes a streaming response may queue before its writer waits. "
                              "Default \"64KiB\".", 1, U32),
        "write_batch": size("Frames are packed until about this many bytes per write. Default \"112KiB\".",
                            1024, U32),
        "notsent_lowat": size("TCP_NOTSENT_LOWAT on HTTP/2 connections; 0 is the kernel's. Default 0.", 0, U32),
        "handshake_timeout": dur("The client preface and first SETTINGS. Default \"10s\".", True),
        "enable_connect_protocol": boolean("SETTINGS_ENABLE_CONNECT_PROTOCOL (WebSockets over HTTP/2). "
                                           "Default true."),
        "stream_stall_timeout": dur("A stream blocked by its own flow-control window is reset after "
                                    "this. Default \"60s\".", True),
    },
)
http3 = table(
    "HTTP/3 and QUIC limits, for listeners with quic = true.",
    {
        "max_concurrent_streams": count("Requests a client may have open at once. Default 100.", 1, U32),
        "stream_window": size("Request-body bytes a client may send ahead on one stream. "
                              "Default \"256KiB\".", 1024, U32),
        "connection_window": size("The same over all of a connection's streams. Default \"1MiB\".", 1024, U32),
        "send_window": size("Response bytes a connection may have queued unacknowledged. "
                            "Default \"2MiB\".", 1024, U32),
        "max_header_list_size": size("SETTINGS_MAX_FIELD_SECTION_SIZE. Default \"64KiB\".", 1, U32),
        "retry_threshold": count("Handshakes in progress beyond which new clients must prove their "
                                 "address (Retry); 0: always. Default 64.", 0, U32),
        "early_data": boolean("Accept 0-RTT requests (replayable). Default false."),
    },
)
file_cache = table(
    "The open-file cache.",
    {
        "enabled": boolean("Cache open files and their info. Default true."),
        "sweep": dur("Reaper interval. Default \"1s\".", True),
        "sweep_ms": count("The older spelling of sweep, in milliseconds (not with sweep).", 1),
        "max_entries": count("Most entries. Default 10000.", 1),
        "memory_max": size("Files up to this size are also held in memory (0: always sendfile). "
                           "Default \"16KiB\"."),
    },
    **{"not": {"description": "`sweep` and `sweep_ms`: set one", "required": ["sweep", "sweep_ms"]}},
)
compress = table(
    "On-the-fly compression settings shared by every route with compress = true.",
    {
        "min_size": size("Smaller bodies are sent as they are. Default \"256B\"."),
        "gzip_level": count("gzip level; 0 turns gzip off. Default 6.", 0, 9),
        "brotli_quality": count("brotli quality; 0 turns brotli off. Default 5.", 0, 11),
        "zstd_level": count("zstd level; 0 turns zstd off. Default 3.", 0, 19),
        "max_streams": count("Most responses compressed as they are sent at once. Default 128.", 0, 1_000_000),
        "cache_max": size("Memory for compressed copies of static files, in all. Default \"64MiB\"."),
        "cache_file_max": size("Largest file whose compressed copy is kept. Default \"1MiB\"."),
    },
)

# ---------------------------------------------------------------- [log]
log = table(
    "The access log and diagnostics.",
    {
        "access": string("Access log: \"off\" (default), \"stdout\" or a file."),
        "format": string("\"combined\" (default), \"json\", or a template of $name fields and "
                         "{placeholders}.", r"combined|json|.*[$].*|.*\{.*"),
        "request_id": enum("\"generate\" (default) or \"trust\" (keep a client's well-formed X-Request-Id).",
                           ["generate", "trust"]),
        "size": size("Rotate the access log at this size; 0: never. Default \"10MiB\"."),
        "backups": count("Rotated files kept. Default 5.", 0, 1000),
        "error": string("Diagnostics: \"stderr\" (default) or a file."),
        "error_format": enum("\"text\" (default) or \"json\".", ["text", "json"]),
        "level": string("error, warn, info (default), debug, trace, or a filter (\"selvedge=debug,warn\")."),
    },
)

# ---------------------------------------------------------------- [admin]
admin = table(
    "The admin listener: metrics, health, status pages and the configuration API.",
    {
        "listen": ref("listenAddress", description="Loopback \"IP:PORT\" or \"unix:PATH\"; another address "
                      "needs public = true."),
        "public": boolean("Allow a non-loopback listen address. Default false."),
        "api": boolean("The configuration API (/config, /load, /upstreams, /reload, /stop). Default false."),
        "token": string("Bearer token of the configuration API: at least 16 visible ASCII characters.",
                        r"[!-~]{16,}"),
        "persist": string("File the configuration API writes the configuration to after each change.",
                          minLength=1),
        "tls": table(
            "HTTPS on the admin listener (TCP only); with client_ca, mutual TLS.",
            {
                "cert": string("PEM certificate chain of the admin listener."),
                "key": string("Its private key (PEM)."),
                "client_ca": string("PEM CA certificates whose clients are admitted (mutual TLS); the "
                                    "configuration API then answers on any address without a token."),
            },
            required=["cert", "key"],
        ),
    },
    required=["listen"],
)
fleet = table(
    "A fleet of servers sharing TLS ticket keys, fleet rate limits, cache purges and configuration "
    "changes through Redis or Valkey (docs/fleet.md).",
    {
        "redis": string("redis://[USER:PASSWORD@]HOST:PORT/DB, rediss:// (TLS) or unix:///PATH.",
                        r"(?:rediss?|unix|redis\+unix)://.+"),
        "prefix": string("Put before every key and channel name. Default \"selvedge:\".", r"[!-~]+"),
        "instance": string("This instance's name in GET /fleet. Default host:pid.", r"[!-~]{1,200}"),
        "timeout": dur("The longest a request waits for Redis before the local limiter decides. "
                       "Default 5ms.", True),
        "connections": count("Multiplexed connections to Redis. Default 2.", 1, 64),
        "heartbeat": dur("How often an instance says it is alive (gone after three missed). Default 1s.", True),
        "ticket_rotation": dur("How long one TLS session ticket key seals new tickets (at least 1s). "
                               "Default 12h.", True),
        "instances": count("Instances a fleet limit is divided among while Redis is unreachable. "
                           "Default: the live instances last seen.", 1, 10_000),
        "share_config": boolean("Configuration API changes go to every instance. Default true."),
        "sentinels": strings("Redis Sentinel addresses (host:port) that name the primary.",
                             item=string("A sentinel's host:port.", r".+:[0-9]{1,5}")),
        "sentinel_master": string("The primary's name at the sentinels. Default \"mymaster\".", minLength=1),
        "acme_storage": boolean("With [acme]: the ACME account, certificates and locks are kept in "
                                "Redis. Default true."),
    },
    required=["redis"],
)
admin["if"] = {"required": ["tls"]}
admin["then"] = {"properties": {"listen": {"not": {"description": "a Unix socket, where tls needs a TCP address",
                                                   "pattern": "^unix:"}}}}

# ---------------------------------------------------------------- [acme]
acme = table(
    "Automatic HTTPS for the virtual hosts with tls = \"acme\". Every key is optional.",
    {
        "email": {"type": "string", "pattern": rf"@[\s\S]*\.|{ENV}",
                  "description": "Contact address given to the CA (an e-mail address, mailto: optional)."},
        "directory": string("The CA's ACME directory URL (https://); default Let's Encrypt's production.",
                            r"\s*https://.*"),
        "ca_roots": string("PEM roots trusted for the CA's own HTTPS; default the system's."),
        "storage": string("Account, certificates and keys. Default \"/var/lib/selvedge/acme\"."),
        "challenge": enum("\"tls-alpn-01\" (default), \"http-01\" or \"dns-01\" (needs [acme.dns]; the only one for "
                          "wildcard names).", ["tls-alpn-01", "http-01", "dns-01"]),
        "renew_before": {
            "description": "Renew when this much of the lifetime is left: a percentage (\"33%\", the "
            "default) or a duration (\"30d\").",
            "anyOf": [
                ref("nonZeroDuration"),
                {"type": "string", "pattern": r"%\s*$"},
            ],
        },
        "profile": string("The CA's certificate profile; default the CA's default.", r"[!-~]+"),
        "retry_min": dict(dur("First wait after a failed order, doubling (at least 1s). Default \"2m\".",
                              True), minimum=1),
        "retry_max": dict(dur("Longest wait between attempts (at least 1s). Default \"6h\".", True),
                          minimum=1),
        "dns": table(
            "[acme.dns]: how the DNS-01 TXT records are written and checked (challenge = \"dns-01\").",
            {
                "provider": enum("\"rfc2136\" (TSIG-signed dynamic updates) or \"exec\" (a command).",
                                 ["rfc2136", "exec"]),
                "server": string("rfc2136: the zone's primary, \"host\" or \"host:port\" (port 53 by default)."),
                "zone": string("rfc2136: the zone to update; default the zone whose SOA the server gives."),
                "key_file": string("rfc2136: a TSIG key as tsig-keygen writes it (key \"NAME\" { ... };)."),
                "key_name": string("rfc2136: the TSIG key's name (with key_secret, instead of key_file)."),
                "key_algorithm": enum("rfc2136: the TSIG algorithm. Default \"hmac-sha256\".",
                                      ["hmac-sha256", "hmac-sha384", "hmac-sha512"]),
                "key_secret": string("rfc2136: the TSIG secret, base64."),
                "command": strings("exec: the program (absolute path) and its first arguments; run as "
                                   "COMMAND present|cleanup FQDN VALUE.", minItems=1),
                "check": strings("Servers (\"host:port\") asked for the records before the CA is told; default "
                                 "the zone's NS servers and the rfc2136 server."),
                "propagation_timeout": dur("Longest wait for the records on every checked server (and for a "
                                           "command). Default \"2m\".", True),
                "ttl": count("TTL of the records, seconds (1 to 86400). Default 60.", 1, 86400),
            },
            required=["provider"],
        ),
    },
)

# ---------------------------------------------------------------- [cache] zones
cache_keys = {
    "size": size("Memory for entries (at least 4 KiB). Default \"64MiB\".", 4096),
    "path": string("The disk tier's directory, the zone's own; default none."),
    "disk_size": size("Bytes of files in the disk tier (with path; at least 4 KiB). Default \"1GiB\".", 4096),
    "max_entry_size": size("The largest body stored. Default 8 MiB or size/8 (64 MiB or disk_size/8 "
                           "with path).", 1),
    "memory_entry_size": size("With path: bodies up to this are kept in memory too. Default \"256KiB\"."),
    "heuristic": {"type": "number", "minimum": 0, "maximum": 1,
                  "description": "Fraction of the time since Last-Modified taken as the freshness of a "
                  "response that says nothing; 0 (default): off."},
    "stale_if_error": dur("How long past its lifetime a response may be served when the upstream "
                          "fails, when nothing says. Default \"0s\"."),
    "lock_timeout": dur("How long a request waits for another's fetch of the same key. Default \"5s\".", True),
    "lock_waiters": count("Requests that may wait for one fetch. Default 1024.", 0, 1_000_000),
    "min_uses": count("Requests for a key before its response is stored. Default 1.", 1, 1000),
    "client_directives": boolean("Follow a request's no-cache, max-age, min-fresh, max-stale and "
                                 "stale-if-error. Default false."),
    "key": string("The cache key, a template of placeholders. Default scheme://authority/path?query."),
}
defs["cacheZone"] = table(
    "A named HTTP cache zone ([[cache]] or [[cache.zone]]).",
    dict({"name": string("The zone's name, used by routes (cache = \"NAME\").", minLength=1)}, **cache_keys),
    required=["name"],
    dependentRequired={"disk_size": ["path"]},
)
route_cache_table = table(
    "A route's HTTP cache: its own zone's settings, or `zone` naming a [[cache]] zone.",
    dict(
        cache_keys,
        zone=string("A [[cache]] zone's name; the zone's settings are then its table's."),
        bypass=ref("match", description="Requests these matchers admit skip the cache."),
        no_store=ref("match", description="Responses to requests these matchers admit are not stored."),
    ),
    dependentRequired={"disk_size": ["path"]},
)
route_cache_table["if"] = {"required": ["zone"]}
route_cache_table["then"] = {"propertyNames": {"enum": ["zone", "key", "bypass", "no_store"]}}
defs["routeCache"] = {
    "description": "The HTTP cache in front of this proxy or FastCGI route: a [[cache]] zone's name, "
    "or a table.",
    "anyOf": [{"type": "string"}, route_cache_table],
}
cache = {
    "description": "[cache] (max_age, and zones as [[cache.zone]]), or the HTTP cache's zones as "
    "[[cache]].",
    "anyOf": [
        table(
            "The [cache] table.",
            {
                "max_age": dur("Cache-Control: max-age for every static route; a route's own wins. "
                               "Default none."),
                "zone": {"type": "array", "items": ref("cacheZone"), "description": "Named zones."},
            },
        ),
        {"type": "array", "items": ref("cacheZone"), "description": "Named zones ([[cache]])."},
    ],
}

# ---------------------------------------------------------------- route features
defs["upstreamTls"] = table(
    "TLS to the route's https:// upstreams.",
    {
        "ca": string("PEM file of the certificates to trust instead of the system's CAs."),
        "sni": string("Name sent in SNI and verified; default the upstream's host."),
        "verify": boolean("Verify the upstream's certificate and name. Default true."),
        "client_cert": string("PEM certificate chain presented when the upstream asks (mutual TLS)."),
        "client_key": string("Its private key (PEM)."),
    },
    dependentRequired={"client_cert": ["client_key"], "client_key": ["client_cert"]},
)
defs["health"] = table(
    "Active health checks of the pool's members.",
    {
        "path": string("Path requested (GET). Default \"/\".", r"/[!-~]*"),
        "interval": dur("Time between checks of a member. Default \"5s\".", True),
        "timeout": dur("Time a check may take. Default \"2s\".", True),
        "healthy": count("Passing checks in a row that bring a member back. Default 2.", 1, 1000),
        "unhealthy": count("Failing checks in a row that take a member out. Default 3.", 1, 1000),
        "expect": {
            "description": "The status a passing check answers (200, the default) or a class (\"2xx\").",
            "anyOf": [
                {"type": "integer", "minimum": 100, "maximum": 599},
                {"type": "string", "pattern": pat(r"[1-5][xX][xX]|\+?[0-9]+")},
            ],
        },
    },
)
UPSTREAM = r"(?:https?://[^/@]+|unix:/).*"
defs["upstream"] = {
    "description": "An upstream URL, or { url, weight } (weight 1-10000, default 1).",
    "anyOf": [
        {"type": "string", "pattern": pat(UPSTREAM)},
        {
            "type": "object",
            "properties": {
                "url": {"type": "string", "pattern": pat(UPSTREAM), "description": "The upstream's URL."},
                "weight": count("Its share of requests (1-10000). Default 1.", 1, 10000),
            },
            "required": ["url"],
        },
    ],
}
defs["proxy"] = table(
    "A reverse proxy to HTTP upstreams: one `upstream`, or a pool (`upstreams`).",
    {
        "name": string("The pool's name in the admin API (1-64 letters, digits, '-' and '_', not only "
                       "digits; one per route); default \"V.R\" (positions).", "[A-Za-z0-9_-]{1,64}",
                       **{"not": {"description": "digits only, which the admin API reads as positions",
                                  "pattern": "^[0-9]+$"}}),
        "upstream": string("One upstream: \"http://host[:port][/base]\", \"https://...\" or "
                           "\"unix:/path.sock\".", UPSTREAM),
        "upstreams": {"type": "array", "items": ref("upstream"), "minItems": 1,
                      "description": "A pool instead of `upstream`: URLs or { url, weight } tables."},
        "tls": ref("upstreamTls", description="TLS settings for the https:// upstreams."),
        "http2": boolean("HTTP/2 to the upstreams (h2c for http:// and unix:, ALPN for https://). "
                         "Default false."),
        "http2_window": size("With http2: each stream's receive window. Default \"256KiB\".", 65535,
                             (1 << 31) - 1),
        "balance": enum("\"round_robin\" (default), \"least_conn\", \"random_two\" or \"hash\".",
                        ["round_robin", "least_conn", "random_two", "hash"]),
        "hash_key": string("With balance = \"hash\": \"client_ip\" (default), \"header:NAME\" or "
                           "\"cookie:NAME\".", rf"client_ip|header:{TOKEN}|cookie:{TOKEN}"),
        "health": ref("health", description="Active health checks; default none."),
        "max_fails": count("Failures within fail_timeout that mark a member down; 0: never. Default 3.",
                           0, 1000),
        "fail_timeout": dur("The window for max_fails, and how long a member stays out. Default \"10s\".",
                            True),
        "fail_status": strings("Upstream statuses (500-599) that count as failures. Default [502, 503, 504].",
                               {"type": "integer", "minimum": 500, "maximum": 599}),
        "retries": count("Other members a failed request may go to (0-100). Default 1.", 0, 100),
        "retry_budget": {"type": "number", "minimum": 0, "maximum": 1,
                         "description": "Retries stay below this fraction of requests. Default 0.2."},
        "retry_budget_min": count("Retries per second per worker always allowed. Default 10.", 0, U32),
        "resolve": dur("Re-resolve upstream host names this often; default at load only.", True),
        "host": string("Host sent upstream: \"preserve\" (default), \"upstream\", or a literal name.",
                       r"[!-~]+"),
        "strip_prefix": boolean("Remove the route's path before forwarding (not with `path`). "
                                "Default false."),
        "trust_forwarded": boolean("Keep the client's Forwarded/X-Forwarded-* and append. Default false."),
        "connect_timeout": dur("Connecting, and waiting for a slot under max_connections. Default \"5s\".",
                               True),
        "first_byte_timeout": dur("From the request's end to the response's first byte. Default \"60s\".",
                                  True),
        "idle_timeout": dur("Any later upstream read or write. Default \"60s\".", True),
        "keepalive_timeout": dur("How long an idle pooled connection is kept. Default \"15s\".", True),
        "max_idle": count("Idle connections kept per member per worker. Default 64.", 0, U32),
        "max_connections": count("Connections per member per worker; 0: no limit. Default 1024.", 0, U32),
        "tunnel_idle_timeout": dur("A WebSocket (Upgrade) tunnel silent both ways. Default \"5m\".", True),
        "encoded_slashes": enum("\"refuse\" (default: %2F is a 400) or \"keep\" (forwarded as %2F).",
                                ["refuse", "keep"]),
        "underscores_in_headers": boolean("Forward request fields whose names contain '_'. Default false."),
        "max_response_head": size("Largest upstream response head (502 beyond). Default \"32KiB\".", 64, U32),
        "max_response_headers": count("Most fields in an upstream response head. Default 100.", 1, 65535),
        "header_up": ref("headerOps", description="Fields of the request sent upstream set, added, "
                         "deleted or rewritten (\"Host\" may be set, not added or deleted).",
                         propertyNames=refused_names("Host, which can only be set",
                                                     rf"^[+-]{ci('host')}\*?$")),
        "header_down": ref("headerOps", description="Fields of the upstream's response set, added, "
                           "deleted or rewritten (not Host).",
                           propertyNames=refused_names("Host, which only header_up may set",
                                                       rf"^[+-]?{ci('host')}$|^-{ci('host')}\*$")),
        "path": string("The path sent upstream, a template (\"/v2{path}\"); not with strip_prefix.",
                       r"[/{].*"),
    },
    oneOf=[{"required": ["upstream"]}, {"required": ["upstreams"]}],
    dependentSchemas={
        "http2_window": {"required": ["http2"], "properties": {"http2": {"const": True}}},
    },
    **{"not": {"description": "`path` and `strip_prefix`: `path` writes the whole path",
               "required": ["path", "strip_prefix"]}},
)
defs["cgi"] = table(
    "CGI/1.1 scripts from a directory.",
    {
        "dir": string("Directory of the scripts."),
        "timeout": dur("Without progress: 504 before the head, cut after. Default \"30s\".", True),
        "max_output_head": size("Larger response head: 502. Default \"64KiB\".", 1, U32),
        "max_buffered_output": size("Output with Content-Length up to this is sent with it. "
                                    "Default \"1MiB\".", 0, U32),
        "max_buffered_input": size("A request body without a length is read first, up to this. "
                                   "Default \"1MiB\".", 0, U32),
        "max_local_redirects": count("Location: /path replies followed per request (0-100). Default 5.",
                                     0, 100),
        "max_processes": count("Scripts of this route running at once. Default 64.", 1, 65535),
        "interpreters": string_map("Programs running scripts by extension ({ py = \"/usr/bin/python3\" }).",
                                   {"type": "string", "minLength": 1},
                                   propertyNames={"pattern": "[^.]"}),
        "path": string("PATH given to scripts. Default \"/usr/local/bin:/usr/bin:/bin\"."),
        "env": strings("Server variables passed on (\"TZ\") or set (\"LANG=C.UTF-8\").",
                       {"type": "string", "pattern": "^[^=]|^$"}),
        "pass_authorization": boolean("Pass Authorization as HTTP_AUTHORIZATION. Default false."),
    },
    required=["dir"],
)
defs["fastcgi"] = table(
    "A FastCGI application (php-fpm...).",
    {
        "address": string("\"unix:/path.sock\" or \"host:port\" (\"127.0.0.1:9000\", \"[::1]:9000\").",
                          r"unix:/.*|.*:\+?[0-9]+"),
        "root": string("Directory of the scripts, the same path the application sees."),
        "index": string("A directory's script (a file name); \"\": none. Default \"index.php\".",
                        r"(?:[^./][^/]*)?"),
        "split_path": string("What a script's file name ends with. Default \".php\".", r"[^/]+"),
        "timeout": dur("Any wait on the application. Default \"60s\".", True),
        "connect_timeout": dur("Connecting, and waiting under max_connections. Default \"5s\".", True),
        "keepalive_timeout": dur("An idle kept connection is closed after this. Default \"15s\".", True),
        "max_idle": count("Idle connections kept per worker; 0: a connection per request. Default 16.", 0, U32),
        "max_connections": count("Connections per worker, busy or idle; 0: no limit. Default 1024.", 0, U32),
        "max_output_head": size("Larger response head: 502. Default \"64KiB\".", 1, U32),
        "max_buffered_input": size("A request body without a length is read first, up to this. "
                                   "Default \"1MiB\".", 0, U32),
        "params": string_map("More variables, set after the standard ones."),
        "pass_authorization": boolean("Pass Authorization as HTTP_AUTHORIZATION. Default true."),
        "script_cache": dur("How long each worker remembers a path's script lookup; \"0s\": never. "
                            "Default \"1s\"."),
    },
    required=["address", "root"],
)
defs["respond"] = {
    "description": "A fixed answer: a status (respond = 204), or { status, body, headers }.",
    "anyOf": [
        {"type": "integer", "minimum": 200, "maximum": 599},
        table(
            "A fixed answer.",
            {
                "status": {"type": "integer", "minimum": 200, "maximum": 599,
                           "description": "The status (200-599). Default 200."},
                "body": string("The body, a template (at most 1 MiB). Default empty."),
                "headers": string_map("Response fields (values are templates); names without +/-.",
                                      propertyNames={
                                          "pattern": "^[^+-]",
                                          "not": {"description": "a field that frames the message, or Host",
                                                  "pattern": "^(?:" + "|".join(ci(f) for f in FRAMING + ["host"])
                                                  + ")$"}}),
            },
            **{"if": {"required": ["status"], "properties": {"status": {"enum": [204, 304]}}},
               "then": {"properties": {"body": {"maxLength": 0}}}},
        ),
    ],
}
defs["cors"] = table(
    "Cross-origin requests (CORS).",
    {
        "origins": strings("Allowed origins (\"https://app.example\"), or [\"*\"].", minItems=1),
        "methods": strings("Methods allowed. Default [\"GET\", \"HEAD\", \"POST\"]."),
        "headers": strings("Request headers allowed ([\"*\"]: any, without credentials). Default []."),
        "expose": strings("Response headers exposed to scripts. Default []."),
        "credentials": boolean("Cookies and HTTP authentication may go with requests (needs explicit "
                               "origins). Default false."),
        "max_age": dur("How long a browser may keep a preflight's answer. Default none."),
    },
    required=["origins"],
)
defs["auth"] = table(
    "HTTP Basic authentication against an htpasswd file.",
    {
        "realm": string("The realm (printable ASCII, no quotes or backslashes). Default \"restricted\".",
                        r"[ !#-\[\]-~]+"),
        "htpasswd": string("The htpasswd file (bcrypt or {SHA} entries)."),
    },
    required=["htpasswd"],
)
defs["rate"] = table(
    "A rate limit per client address (IPv6 by /64); 429 with Retry-After beyond.",
    {
        "requests": count("Requests admitted per `per`.", 1, U32),
        "per": dur("The window `requests` are counted over.", True),
        "burst": count("Requests admitted at once from a quiet client. Default `requests`.", 1, U32),
        "max_clients": count("Client addresses tracked at most. Default 65536.", 1, 100_000_000),
        "scope": enum("Where the limit is counted: \"local\" (this server, the default) or \"fleet\" "
                      "(every server of the [fleet] together, in Redis).", ["local", "fleet"]),
    },
    required=["requests", "per"],
)
defs["forwardAuth"] = table(
    "Each request is first asked about to an authentication service.",
    {
        "url": string("The service: \"http://...\", \"https://...\" or \"unix:/path.sock:/verify\".",
                      r"https?://.*|unix:.*"),
        "headers": strings("Request fields sent (and Host); default all of them."),
        "copy_headers": strings("Answer fields copied onto the request on a 2xx."),
        "timeout": dur("Time for the answer (else 502). Default \"5s\".", True),
        "cache": dur("How long an answer letting a request through is reused. Default none."),
        "cache_key": strings("Fields a cached answer is keyed on. Default [\"Cookie\", \"Authorization\"]."),
        "cache_max": count("Cached answers at most. Default 10000.", 1, 10_000_000),
    },
    required=["url"],
)

# ---------------------------------------------------------------- [[vhost.route]]
HANDLERS = ["root", "cgi", "fastcgi", "proxy", "respond"]
defs["route"] = table(
    "A route: a path prefix and exactly one of root, cgi, fastcgi, proxy or respond.",
    {
        "path": string("The prefix, starting with '/'; normalized, without a trailing slash.", r"/.*"),
        "match": ref("match", description="Matchers of which one must hold for the route to apply."),
        "root": string("Static files from this directory."),
        "cgi": ref("cgi", description="CGI scripts."),
        "fastcgi": ref("fastcgi", description="A FastCGI application."),
        "proxy": ref("proxy", description="A reverse proxy."),
        "respond": ref("respond", description="A fixed answer from the server itself."),
        "try_files": strings("Static route: paths tried in order (templates); the last one (or a status "
                             "\"=404\") when none is a file.",
                             {"type": "string", "pattern": pat(r"[/{].*|=\+?0*[45][0-9][0-9]")}, minItems=1),
        "index": strings("Static route: index files tried in a directory (file names, no '/'). "
                         "Default [\"index.html\"]."),
        "dotfiles": boolean("Serve names starting with '.'. Default false."),
        "symlinks_outside": boolean("Follow symlinks that leave the root. Default false."),
        "precompressed": boolean("Serve file.br / file.gz when Accept-Encoding allows. Default true."),
        "max_age": dur("Cache-Control: max-age. Default [cache] max_age."),
        "error_pages": string_map("{ 404 = \"404.html\" }: files served with that status (400-599)."),
        "listing": boolean("Static route: list directories without an index. Default false."),
        "listing_max": count("Static route: most entries a listing reads. Default 10000.", 1, 10_000_000),
        "fallback": string("Static route: a file under root served for page requests of missing paths "
                           "(\"/index.html\").", r"/.+"),
        "compress": boolean("Compress responses on the fly by Accept-Encoding. Default true."),
        "headers": ref("headerFields", description="Fields set on (or removed from) every response of "
                       "the route."),
        "cors": ref("cors", description="CORS: preflights and Access-Control-* fields."),
        "auth": ref("auth", description="HTTP Basic authentication."),
        "allow": ref("networks", description="Networks or addresses admitted; others get 403. "
                     "Default all."),
        "deny": ref("networks", description="Networks or addresses refused (403); deny wins over allow."),
        "max_body": size("Largest request body for this route (413). Default [limits] max_body."),
        "rate": ref("rate", description="A rate limit per client address."),
        "forward_auth": ref("forwardAuth", description="Ask an authentication service about each request."),
        "cache": ref("routeCache", description="The HTTP cache (proxy and FastCGI routes)."),
    },
    required=["path"],
    oneOf=[{"required": [h]} for h in HANDLERS],
    dependentRequired={"try_files": ["root"], "listing": ["root"], "listing_max": ["root"],
                       "fallback": ["root"]},
    dependentSchemas={"cache": {"anyOf": [{"required": ["proxy"]}, {"required": ["fastcgi"]}]}},
)
defs["route"]["if"] = {"required": ["root"]}
# Checked on static routes only (other routes ignore these keys).
defs["route"]["then"] = {
    "properties": {
        "error_pages": {"propertyNames": {"pattern": pat(r"\+?0*[45][0-9][0-9]")}},
        "index": {"items": {"pattern": pat(r"[^/]+"),
                            "not": {"description": "\".\" or \"..\", not a file name", "enum": [".", ".."]}}},
    }
}

# ---------------------------------------------------------------- [[vhost.redirect]]
defs["redirect"] = table(
    "A redirect or rewrite rule, checked in order before the routes; needs `from`, `match` or both.",
    {
        "from": string("A regular expression (Rust regex) on the normalized path."),
        "match": ref("match", description="Matchers of which one must hold."),
        "to": string("The target: $1, ${1}, ${name} are captures, {name} placeholders; a path or an "
                     "absolute URL. Visible ASCII.", r"[!-~]+"),
        "status": {"enum": [301, 302, 307, 308], "description": "301, 302 (default), 307 or 308."},
        "rewrite": boolean("Serve `to` (a path) internally instead of redirecting; not with status. "
                           "Default false."),
    },
    required=["to"],
    anyOf=[{"required": ["from"]}, {"required": ["match"]}],
)
defs["redirect"]["if"] = {"required": ["rewrite"], "properties": {"rewrite": {"const": True}}}
defs["redirect"]["then"] = {
    "not": {"description": "`status` with `rewrite = true`: a rule redirects or rewrites", "required": ["status"]},
    "properties": {"to": {"pattern": pat(r"[/${].*")}},
}

# ---------------------------------------------------------------- [[vhost]]
HOST = r"(?:\*\.)?(?:[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*|\[.*\]|[0-9A-Fa-f:.]+)"
defs["vhost"] = table(
    "A virtual host: the names it answers, its certificate, routes and redirect rules.",
    {
        "hosts": strings("Names this host answers (\"example.com\", \"*.example.com\"); none: the "
                         "default host (at most one).", {"type": "string", "pattern": pat(HOST)}),
        "tls": {
            "description": "This host's certificate on the TLS listeners ({ cert, key }), or \"acme\".",
            "anyOf": [
                {"type": "string", "const": "acme"},
                ref("envString"),
                table("The certificate and key (PEM), chosen by SNI from hosts.", {
                    "cert": string("PEM certificate chain."),
                    "key": string("PEM private key."),
                    "strict_sni": boolean("Accepted for compatibility; it is the listener's setting."),
                }, required=["cert", "key"]),
            ],
        },
        "route": {"type": "array", "items": ref("route"), "description": "[[vhost.route]] tables."},
        "redirect": {"type": "array", "items": ref("redirect"),
                     "description": "[[vhost.redirect]] rules, checked in order before the routes."},
        "matchers": {
            "type": "object",
            "description": "[vhost.matchers.NAME]: named conditions for routes and redirect rules.",
            "propertyNames": {"pattern": pat("[A-Za-z0-9_-]+")},
            "additionalProperties": ref("matcher"),
        },
    },
)
ACME_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
defs["vhost"]["allOf"] = [
    {"if": {"required": ["tls"]},
     "then": {"required": ["hosts"], "properties": {"hosts": {"minItems": 1}}}},
    {"if": {"required": ["tls"], "properties": {"tls": {"const": "acme"}}},
     "then": {"properties": {"hosts": {"items": {
         "description": "a fully qualified DNS name, or *. and one (ACME: no IP address; a wildcard needs "
                        "challenge = \"dns-01\")",
         "pattern": pat(rf"(?:\*\.)?{ACME_HOST}")}}}}},
]

# ---------------------------------------------------------------- the document
mime = {
    "type": "object",
    "description": "Content types by file extension (without the dot), before the built-in ones.",
    "propertyNames": {"pattern": pat("[A-Za-z0-9_-]{1,16}")},
    "additionalProperties": {
        "type": "string",
        "pattern": pat(rf"\s*{TOKEN}/{TOKEN}\s*(?:;.*)?"),
    },
}
no_default_host = {"description": "a [[vhost]] without hosts (the default host)", "anyOf": [{"not": {"required": ["hosts"]}}, {"properties": {"hosts": {"maxItems": 0}}}]}
schema = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "selvedge configuration",
    "description": "The TOML configuration file of the selvedge web server (docs/config.md), as the "
    "parsed document. Values may hold ${NAME} environment references, substituted before parsing. "
    "The server checks more than this schema can (files exist, certificates load, regular "
    "expressions compile, matcher names resolve).",
    "type": "object",
    "additionalProperties": False,
    "required": ["vhost"],
    "properties": {
        "server": server,
        "listen": {"type": "array", "items": ref("listen"),
                   "description": "[[listen]]: the addresses served; default one cleartext listener on "
                   "127.0.0.1:8080."},
        "timeouts": timeouts,
        "limits": limits,
        "http2": http2,
        "http3": http3,
        "file_cache": file_cache,
        "cache": cache,
        "log": log,
        "vhost": {"type": "array", "items": ref("vhost"), "minItems": 1,
                  "description": "[[vhost]]: virtual hosts; at least one, at most one without hosts.",
                  "contains": no_default_host, "minContains": 0, "maxContains": 1},
        "acme": acme,
        "compress": compress,
        "admin": admin,
        "fleet": fleet,
        "mime": mime,
    },
    "$defs": defs,
}

out = json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as f:
        f.write(out)
else:
    sys.stdout.write(out)
