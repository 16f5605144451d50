#!/usr/bin/env python3
"""Validates selvedge configuration files against the JSON Schema of the configuration.

    python3 tests/schema_check.py SCHEMA [FILE|-]... [--expect-invalid FILE|-...]

Each TOML document (`-`: standard input) is parsed with `tomllib` and validated with
jsonschema's Draft202012Validator; one line is printed per file, `ok PATH` or
`invalid PATH: MESSAGE at JSONPATH` (the most telling error, and where it is in the
document: `$.vhost[0].route[1].proxy`). Files after `--expect-invalid` must be invalid (for
negative tests; a valid one is also named on stderr). The exit status is 0 when every file
is as expected (valid, or invalid after `--expect-invalid`), 1 otherwise, 2 for a usage
error or a schema that cannot be read.

Before parsing, `${NAME}` and `${NAME:-default}` are substituted from the environment as the
server does (config/substitute.rs: upper-case names only, `$${` writes `${`), so that
`port = ${PORT:-8080}` parses; a variable that is unset and has no default is left as
written (the schema accepts strings holding such a reference), where the server would
refuse the file.

tomllib reads TOML 1.0: a file using TOML 1.1 additions the server's parser also takes
(an inline table over several lines, a trailing comma in one) is reported as not valid TOML.

Needs Python 3.11+ (tomllib) and jsonschema (Debian: python3-jsonschema).
"""

import json
import os
import re
import sys
import tomllib

try:
    import jsonschema
except ImportError:  # pragma: no cover
    sys.stderr.write("schema_check: the jsonschema module is missing (apt install python3-jsonschema)\n")
    sys.exit(2)

_NAME = re.compile(r"[A-Z_][A-Z0-9_]*\Z")


def substitute(text, env=os.environ):
    """The text with `${NAME}` / `${NAME:-default}` put in, as config/substitute.rs does
    (unset variables without a default are kept)."""
    if "${" not in text:
        return text
    out = []
    rest = text
    while True:
        i = rest.find("${")
        if i < 0:
            break
        if rest[:i].endswith("$"):
            # `$${`: a literal `${`.
            out.append(rest[: i - 1])
            out.append("${")
            rest = rest[i + 2 :]
            continue
        out.append(rest[:i])
        body_start = i + 2
        close = rest.find("}", body_start)
        inner = rest[body_start:close] if close >= 0 else None
        if inner is not None:
            name, sep, default = inner.partition(":-")
            default = default if sep else None
        if inner is None or not _NAME.match(name):
            # Not a variable (a redirect's `${1}`, `${name}`): kept.
            out.append("${")
            rest = rest[body_start:]
            continue
        value = env.get(name)
        if value is not None and not (value == "" and default is not None):
            out.append(value)
        elif default is not None:
            out.append(default)
        else:
            out.append(rest[i : close + 1])
        rest = rest[close + 1 :]
    out.append(rest)
    return "".join(out)


def json_path(error):
    """The instance path of an error, as `$.vhost[0].route[1].proxy`."""
    path = "$"
    for p in error.absolute_path:
        if isinstance(p, int):
            path += f"[{p}]"
        elif re.match(r"[A-Za-z_][A-Za-z0-9_-]*\Z", p):
            path += f".{p}"
        else:
            path += f"[{json.dumps(p)}]"
    return path


def best_error(errors):
    """The most telling error (jsonschema's relevance ranking), followed into anyOf/oneOf:
    of their branches, one the value's type fits, then the one that got deepest into the
    value, then the first."""
    errors = list(errors)
    if not errors:
        return None
    best = jsonschema.exceptions.best_match(errors)
    while best.context:
        branches = {}
        for e in best.context:
            branches.setdefault(e.relative_schema_path[0], []).append(e)

        def rank(item):
            index, errs = item
            type_fits = not any(e.validator == "type" and not e.relative_path for e in errs)
            depth = max(len(e.relative_path) for e in errs)
            return (type_fits, depth, -index if isinstance(index, int) else 0)

        _, errs = max(branches.items(), key=rank)
        best = jsonschema.exceptions.best_match(errs)
    return best


def check(validator, path):
    """None if the file is valid, else why not."""
    try:
        if path == "-":
            raw = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as f:
                raw = f.read()
    except OSError as e:
        return f"cannot read: {e.strerror or e}"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"not UTF-8: {e}"
    try:
        doc = tomllib.loads(substitute(text))
    except tomllib.TOMLDecodeError as e:
        return f"not valid TOML: {e}"
    err = best_error(validator.iter_errors(doc))
    if err is None:
        return None
    return f"{message(err)} at {json_path(err)}"


def message(err):
    """jsonschema's message, or the schema's own words where it has them: the `title` of a
    pattern ("a duration ..."), the `description` of a `not` or a `contains`, instead of a
    dump of the regex or subschema."""
    sub = err.schema.get(err.validator) if isinstance(err.schema, dict) else None
    if err.validator == "not" and isinstance(sub, dict) and "description" in sub:
        if isinstance(err.instance, (dict, list)):
            return f"refused: {sub['description']}"
        return f"{err.instance!r} is refused: {sub['description']}"
    if err.validator == "pattern" and isinstance(err.instance, str) and "title" in err.schema:
        return f"{err.instance!r} is not {err.schema['title']}"
    if err.validator == "pattern" and isinstance(err.instance, str):
        # The alternative every pattern has for ${NAME} references, left out of the message.
        core = err.validator_value.split("|\\$\\{")[0]
        return f"{err.instance!r} does not match {core}"
    if err.validator == "maxContains":
        what = err.schema.get("contains", {}).get("description")
        if what:
            return f"more than {err.validator_value} item(s) of the list are {what}"
    return err.message


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        sys.stderr.write("usage: schema_check.py SCHEMA [FILE|-]... [--expect-invalid FILE|-...]\n")
        return 2
    try:
        with open(argv[1], "rb") as f:
            schema = json.load(f)
        jsonschema.Draft202012Validator.check_schema(schema)
    except (OSError, ValueError, jsonschema.exceptions.SchemaError) as e:
        sys.stderr.write(f"schema_check: {argv[1]}: {e}\n")
        return 2
    validator = jsonschema.Draft202012Validator(schema)
    expect_invalid = False
    all_as_expected = True
    files = 0
    for arg in argv[2:]:
        if arg == "--expect-invalid":
            expect_invalid = True
            continue
        files += 1
        why = check(validator, arg)
        print(f"ok {arg}" if why is None else f"invalid {arg}: {why}")
        if expect_invalid and why is None:
            sys.stderr.write(f"schema_check: {arg}: expected to be invalid\n")
            all_as_expected = False
        elif not expect_invalid and why is not None:
            all_as_expected = False
    if files == 0:
        sys.stderr.write("schema_check: no files given\n")
        return 2
    return 0 if all_as_expected else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
