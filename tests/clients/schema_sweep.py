#!/usr/bin/env python3
r"""JSON-Schema-Test-Suite sweep of `response_format: json_schema` against a running server.

Every test group's schema in shared/testdata/json_schema (draft 2020-12, MANIFEST.md there) plus
the realistic vLLM benchmark schema is sent as a chat request's response_format. Then either
  * the server answers 400: the message must name a JSON-Schema keyword that really occurs in the
    schema (a key of some schema object: not a property name, not inside enum/const/default
    data), quoted ('minContains', "minContains" or `minContains`) or after the word "keyword". Top-level boolean schemas (`true`/`false`) may be refused without a keyword, since
    OpenAI's response_format wants an object; or
  * it answers 200 with n=20 samples (temperature 1, fixed seed): each is checked with Python
    `jsonschema` (Draft 2020-12; `format` asserted only for the optional/format files, where the
    suite asserts it, and only for formats the installed jsonschema can check).
Decisions: a sample cut by max_tokens (finish_reason "length") is never counted valid; it is
counted apart ("cut") and is not a failure by itself, because a cut says nothing about the
constraint. A finished sample the judge itself cannot check (a `pattern` Python's `re` does not
know, such as \p{Letter}; an unresolvable $ref) is counted "not checkable", never valid. A cut
sample must still be a prefix of JSON (checked with the shared json.gbnf), else it is invalid. A
case fails when a finished sample is invalid, when no sample is valid although some finished, or
on any answer other than 200/400. A case whose every sample was cut while still valid JSON so far
is reported as "never finished" (the model, not the constraint: e.g. digits of an unbounded
integer), counted apart in the table, not failed.
max_tokens is 256 for the suite's small schemas and 1024 for the realistic one.

CI runs SUBSET (fixed below, one or two groups per keyword family); the full sweep runs with
`scripts/structured_output_sweep.sh` (pytest -m sweep) or directly:
    python3 tests/clients/schema_sweep.py --base-url http://127.0.0.1:8000 --model smol [--subset]
        [--samples 20] [--jobs 4] [--report sweep.md]
"""
import argparse
import concurrent.futures
import dataclasses
import json
import os
import re
import sys

from client_util import is_json_prefix

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
SHARED = os.environ.get("KVASIR_SHARED_TESTDATA") or os.path.join(REPO, "..", "shared", "testdata")
SUITE = os.path.join(SHARED, "json_schema")

SAMPLES = 20
SEED = 20240601
MAX_TOKENS = 256
MAX_TOKENS_REALISTIC = 1024

# The CI subset: a deterministic, documented choice of groups (file#index within the file).
SUBSET = [
    "draft2020-12/type.json#0",                  # integer
    "draft2020-12/type.json#7",                  # ["integer", "string"]
    "draft2020-12/properties.json#0",            # properties with types
    "draft2020-12/required.json#0",              # required
    "draft2020-12/additionalProperties.json#2",  # additionalProperties with a schema
    "draft2020-12/enum.json#1",                  # heterogeneous enum
    "draft2020-12/const.json#1",                 # const object
    "draft2020-12/items.json#4",                 # nested items
    "draft2020-12/maxItems.json#0",              # maxItems
    "draft2020-12/minLength.json#0",             # minLength
    "draft2020-12/pattern.json#0",               # pattern
    "draft2020-12/minimum.json#1",               # minimum (negative)
    "draft2020-12/anyOf.json#5",                 # anyOf of object shapes
    "draft2020-12/ref.json#4",                   # nested $ref / $defs
    "draft2020-12/boolean_schema.json#1",        # `false`: nothing is valid
    "draft2020-12/not.json#0",                   # not
    "realistic/vllm-structured_schema_1.json",   # vLLM's benchmark schema
]

# Keys whose value maps names to subschemas (the names are not keywords).
_NAME_MAPS = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
# Keys whose value is instance data or plain annotation (not subschemas).
_DATA = {"enum", "const", "default", "examples", "required", "dependentRequired", "$comment", "description",
         "title", "$id", "$anchor", "$dynamicAnchor", "$schema", "$ref", "$dynamicRef", "pattern", "format",
         "type", "$vocabulary"}


@dataclasses.dataclass
class Case:
    id: str            # file path relative to SUITE, plus #group
    description: str
    schema: object
    realistic: bool = False

    @property
    def file(self):
        return self.id.split("#")[0]


@dataclasses.dataclass
class Result:
    case: Case
    status: str = ""          # accepted | refused | refused-bad | error
    message: str = ""
    valid: int = 0
    invalid: int = 0
    cut: int = 0
    unchecked: int = 0        # finished samples the judge could not check (e.g. \p{..} in Python re)
    samples: int = 0
    examples: list = dataclasses.field(default_factory=list)  # (why, text) of invalid samples

    @property
    def never_finished(self):
        # Every sample was cut by max_tokens while still a valid start of JSON: the constraint
        # held and the model did not stop (SmolLM2 writing digits of an unbounded integer).
        return self.status == "accepted" and self.samples > 0 and self.cut == self.samples and self.invalid == 0

    @property
    def ok(self):
        if self.status == "refused":
            return True
        if self.status == "accepted":
            return self.invalid == 0 and (self.valid + self.unchecked >= 1 or self.never_finished)
        return False

    def why(self):
        if self.status == "accepted":
            return (f"{self.valid} valid, {self.invalid} invalid, {self.cut} cut, {self.unchecked} unchecked "
                    f"of {self.samples}: {self.examples[:3]}")
        return f"{self.status}: {self.message[:300]}"


def load_cases(suite=SUITE):
    cases = []
    base = os.path.join(suite, "draft2020-12")
    for dirpath, _, files in os.walk(base):
        for f in files:
            if f.endswith(".json"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, suite).replace(os.sep, "/")
                with open(path, encoding="utf-8") as fh:
                    groups = json.load(fh)
                for i, g in enumerate(groups):
                    cases.append(Case(f"{rel}#{i}", g["description"], g["schema"]))
    real = os.path.join(suite, "realistic")
    if os.path.isdir(real):
        for f in os.listdir(real):
            if f.endswith(".json"):
                with open(os.path.join(real, f), encoding="utf-8") as fh:
                    cases.append(Case(f"realistic/{f}", "realistic " + f, json.load(fh), realistic=True))
    cases.sort(key=lambda c: (c.realistic, c.file, int(c.id.split("#")[1]) if "#" in c.id else 0))
    return cases


def subset(cases):
    by_id = {c.id: c for c in cases}
    missing = [i for i in SUBSET if i not in by_id]
    if missing:
        raise FileNotFoundError(f"subset cases not in {SUITE}: {missing}")
    return [by_id[i] for i in SUBSET]


def keywords_in(schema):
    """The JSON-Schema keywords (object keys in schema position) used anywhere in `schema`."""
    out = set()

    def walk(s):
        if isinstance(s, list):
            for x in s:
                walk(x)
            return
        if not isinstance(s, dict):
            return
        for k, v in s.items():
            out.add(k)
            if k in _NAME_MAPS and isinstance(v, dict):
                for sub in v.values():
                    walk(sub)
            elif k not in _DATA:
                walk(v)

    walk(schema)
    return out


def names_keyword(message, keywords):
    """The keyword the refusal names: quoted ('k', "k" or `k`), or written after the word
    "keyword". A bare word is not enough: "response_format type ... is not supported" must not
    count as naming `type`."""
    for k in sorted(keywords):
        e = re.escape(k)
        if re.search(r"(['\"`])" + e + r"\1", message) or \
                re.search(r"keywords?\b[^.;]*?(?<![A-Za-z0-9_$])" + e + r"(?![A-Za-z0-9_])", message, re.I):
            return k
    return None


def make_validator(case):
    import jsonschema
    cls = jsonschema.validators.validator_for(case.schema, default=jsonschema.Draft202012Validator)
    kw = {}
    if "/optional/format/" in "/" + case.file:
        kw["format_checker"] = cls.FORMAT_CHECKER
    return cls(case.schema, **kw)


def request_body(case, model, samples):
    text = json.dumps(case.schema, ensure_ascii=False)
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": "You reply with JSON only."},
            {"role": "user", "content": f"Write a JSON value that satisfies this JSON Schema:\n{text}"},
        ],
        "response_format": {"type": "json_schema", "json_schema": {"name": "suite_case", "schema": case.schema}},
        "n": samples,
        "temperature": 1.0,
        "seed": SEED,
        "max_tokens": MAX_TOKENS_REALISTIC if case.realistic else MAX_TOKENS,
    }


def run_case(http, case, model, samples=SAMPLES):
    """Sends one case through an httpx.Client (base_url = the server) and judges the answer."""
    import httpx
    res = Result(case)
    try:
        r = http.post("/v1/chat/completions", json=request_body(case, model, samples))
    except httpx.HTTPError as e:  # a dropped connection is this case's failure; the sweep goes on
        res.status, res.message = "error", f"{type(e).__name__}: {e}"
        return res
    if r.status_code == 400:
        try:
            res.message = r.json()["error"]["message"]
        except Exception:  # noqa: BLE001 - any malformed error body is a failure, reported
            res.status, res.message = "error", "400 without an OpenAI error envelope: " + r.text[:300]
            return res
        if not isinstance(case.schema, dict):
            res.status = "refused"  # a boolean schema is not an object: refusing it is fine
        elif names_keyword(res.message, keywords_in(case.schema)):
            res.status = "refused"
        else:
            res.status = "refused-bad"
        return res
    if r.status_code != 200:
        res.status, res.message = "error", f"HTTP {r.status_code}: {r.text[:300]}"
        return res
    res.status = "accepted"
    validator = make_validator(case)
    for choice in r.json()["choices"]:
        res.samples += 1
        text = choice["message"]["content"] or ""
        if choice["finish_reason"] == "length":
            # A cut sample must still be the start of some JSON text: else the grammar let the
            # model leave JSON, which is a failure whatever max_tokens was.
            if not is_json_prefix(text):
                res.invalid += 1
                res.examples.append(("cut, and not a JSON prefix", text[:200]))
                continue
            res.cut += 1
            continue
        try:
            value = json.loads(text)
        except ValueError as e:
            res.invalid += 1
            res.examples.append((f"not JSON: {e}", text[:200]))
            continue
        try:
            errors = list(validator.iter_errors(value))
        except Exception as e:  # noqa: BLE001 - the judge's limit (a regex Python's re lacks, an
            # unresolvable $ref), not a verdict on the sample: counted apart, shown in the table
            res.unchecked += 1
            res.examples.append((f"unchecked: {type(e).__name__}: {e}"[:200], text[:200]))
            continue
        if errors:
            res.invalid += 1
            res.examples.append((str(getattr(errors[0], "message", errors[0]))[:200], text[:200]))
        else:
            res.valid += 1
    return res


def run_cases(base_url, cases, model, samples=SAMPLES, jobs=1, progress=None):
    import httpx
    with httpx.Client(base_url=base_url, timeout=1800) as http:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = [pool.submit(run_case, http, c, model, samples) for c in cases]
            results = []
            for f in futures:
                results.append(f.result())
                if progress:
                    progress(results[-1])
    return results


def summary_table(results):
    """Markdown: one row per file, then totals, then every failing case."""
    rows = {}
    for r in results:
        row = rows.setdefault(r.case.file, {"groups": 0, "accepted": 0, "refused": 0, "refused-bad": 0, "error": 0,
                                            "valid": 0, "invalid": 0, "cut": 0, "unchecked": 0, "samples": 0,
                                            "failed": 0})
        row["groups"] += 1
        row[r.status] += 1
        for k in ("valid", "invalid", "cut", "unchecked", "samples"):
            row[k] += getattr(r, k)
        row["failed"] += not r.ok
    cols = ["groups", "accepted", "refused", "refused-bad", "error", "samples", "valid", "cut", "unchecked", "invalid",
            "failed"]
    head = ("| file | schemas | accepted | refused by keyword | refused, no keyword named | other errors | "
            "samples | valid | cut by length | not checkable | invalid | failing schemas |")
    lines = [head, "|" + "---|" * (len(cols) + 1)]
    total = {c: 0 for c in cols}
    for f in sorted(rows):
        lines.append(f"| {f} | " + " | ".join(str(rows[f][c]) for c in cols) + " |")
        for c in cols:
            total[c] += rows[f][c]
    lines.append("| **total** | " + " | ".join(f"**{total[c]}**" for c in cols) + " |")
    never = sorted(r.case.id for r in results if r.never_finished)
    if never:
        lines += ["", f"Never finished ({len(never)}: every sample cut by max_tokens, still valid JSON so far): "
                  + ", ".join(f"`{c}`" for c in never)]
    refused = sorted((r.case.id, r.message) for r in results if r.status == "refused")
    if refused:
        lines += ["", "Refused (message):"] + [f"- `{i}`: {m[:160]}" for i, m in refused]
    bad = [r for r in results if not r.ok]
    if bad:
        lines += ["", "Failing:"] + [f"- `{r.case.id}` ({r.case.description}): {r.why()}" for r in bad]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default="smol")
    ap.add_argument("--subset", action="store_true", help="only the CI subset")
    ap.add_argument("--samples", type=int, default=SAMPLES)
    ap.add_argument("--jobs", type=int, default=1, help="cases in flight at once")
    ap.add_argument("--report", help="write the markdown summary here too")
    args = ap.parse_args(argv)
    cases = load_cases()
    if args.subset:
        cases = subset(cases)
    results = run_cases(args.base_url, cases, args.model, args.samples, args.jobs,
                        progress=lambda r: print(f"{'ok  ' if r.ok else 'FAIL'} {r.case.id}: {r.why()[:160]}",
                                                 file=sys.stderr, flush=True))
    table = summary_table(results)
    print(table)
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            f.write(table + "\n")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
