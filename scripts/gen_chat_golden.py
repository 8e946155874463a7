#!/usr/bin/env python3
"""Generates tests/data/chat/golden.json: expected chat-template renderings from Python jinja2.

The environment replicates Hugging Face transformers' `_compile_jinja_template` (jinja2's
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loopcontrols and HF's generation tag;
HF's tojson, raise_exception, strftime_now, dict and namespace) and the message normalization of
`apply_chat_template` (null-valued keys dropped, reasoning fields aliased). strftime_now uses a fixed
clock (FIXED_NOW) so outputs are reproducible; the C++ test injects the same time.

Two kinds of cases:
  chat_cases:    every template in the shared chat_templates folder x a set of conversations,
                 with add_generation_prompt on and off and the model's bos/eos tokens.
  snippet_cases: small templates that pin down engine features one at a time.
Each case records the expected output, or the error Python raised (type and message).

When transformers is importable, every chat case is also rendered through transformers' own
render_jinja_template and must match (checks that the replicated environment is faithful).

Usage: scripts/gen_chat_golden.py [--templates DIR] [--out tests/data/chat/golden.json]
"""

import argparse
import copy
import datetime as dt
import hashlib
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

FIXED_NOW = dt.datetime(2025, 1, 15, 10, 30, 0)  # a Wednesday

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------- HF environment (replicated)
def make_env():
    class AssistantTracker(Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

        def _generation_support(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    class TemplateDict:
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                    "Please rename the attribute."
                )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env


ENV = make_env()

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def normalize_messages(messages):
    out = []
    for m in messages:
        m = {k: v for k, v in m.items() if v is not None}
        reasoning = next((m[k] for k in REASONING_FIELDS if m.get(k) is not None), None)
        if reasoning is not None:
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


def render(template_text, context):
    """Returns (output, None, None) or (None, error_type, error_message)."""
    try:
        return ENV.from_string(template_text).render(**context), None, None
    except Exception as e:  # noqa: BLE001 - every failure is an expected outcome to record
        return None, type(e).__name__, str(e)


def chat_context(messages, tools, agp, extra):
    ctx = {"messages": normalize_messages(messages), "tools": tools, "documents": extra.get("documents"),
           "add_generation_prompt": agp}
    ctx.update({k: v for k, v in extra.items() if k != "documents"})
    return ctx


CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


def render_continue_final(template_text, messages, tools, extra):
    """transformers' continue_final_message=True (content field): tag, render, cut at the tag."""
    msgs = normalize_messages(copy.deepcopy(messages))
    final = msgs[-1].get("content")
    if final is None or "content" not in template_text:
        return None, "ValueError", "continue_final_message cannot apply"
    if isinstance(final, list):
        for block in reversed(final):
            if "text" in block:
                final, block["text"] = block["text"], block["text"] + CONTINUE_TAG
                break
        else:
            return None, "ValueError", "no text to continue"
    else:
        msgs[-1]["content"] = final + CONTINUE_TAG
    ctx = {"messages": msgs, "tools": tools, "documents": extra.get("documents"), "add_generation_prompt": False}
    ctx.update({k: v for k, v in extra.items() if k != "documents"})
    out, et, em = render(template_text, ctx)
    if et is not None:
        return out, et, em
    if final.strip() not in out or CONTINUE_TAG.strip() not in out:
        return None, "ValueError", "final message does not appear in the chat"
    loc = out.rindex(CONTINUE_TAG.strip())
    return (out[:loc] if out[loc:loc + len(CONTINUE_TAG)] == CONTINUE_TAG else out[:loc].rstrip()), None, None


def render_with_transformers(template_text, messages, tools, agp, extra, cfm=False):
    try:
        from transformers.utils import chat_template_utils as ctu
    except Exception:  # noqa: BLE001
        return None
    if not hasattr(ctu, "render_jinja_template") or not hasattr(ctu, "_normalize_chat_messages"):
        return None

    class FixedDateTime(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return FIXED_NOW

    ctu.datetime = FixedDateTime
    kwargs = {k: v for k, v in extra.items() if k != "documents"}
    try:
        out, _ = ctu.render_jinja_template(
            conversations=[ctu._normalize_chat_messages(copy.deepcopy(messages))], tools=tools, documents=extra.get("documents"),
            chat_template=template_text, add_generation_prompt=agp, continue_final_message=cfm, **kwargs)
        return ("ok", out[0])
    except Exception as e:  # noqa: BLE001
        return ("error", str(e))


# ---------------------------------------------------------------- inputs
# Snippets: a template, or (template, context). Grouped by the feature they pin down.
MSGS = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "tool_calls": []}]
SNIPPETS = [
    # whitespace control: trim_blocks / lstrip_blocks / - and + modifiers / comments / raw
    "a\n{% if true %}\nb\n{% endif %}\nc\n",
    "  {% if true %}x{% endif %}  \n  y",
    "a  {%- if true %} b {% endif -%}  \n c",
    "a\n  {%+ if true %}b{% endif +%}\nc",
    "a {# comment #}\n  {# c2 #}\nb {#- c3 -#}   c",
    "x  {{- 'v' -}}  y\n{{ 'w' }}\n",
    "{% raw %}{{ not }}{% endraw %}|{%- raw -%}  {% x %}  {%- endraw -%}|",
    "  {% raw %}\n  a\n  {% endraw %}\nb",
    "line1\r\nline2\rline3\n\n",
    "{% for i in range(2) %}\n  {{ i }}\n{% endfor %}\n",
    "\t{%- set x = 1 -%}\t\n{{ x }}",
    "a\n    {% if false %}x{% else %}y{% endif %}\n",
    "{% if true %}  \n{% endif %}end",
    "  {#- c #}  z",
    "{{ 'a' }}\n{% set x = 1 %}   \n{{ x }}",
    # literals and escapes
    "{{ 'a\\nb' }}|{{ \"q\\\"q\" }}|{{ '\\x41\\u00e9\\U0001F600\\t\\101\\d' }}",
    "{{ 1_000 }} {{ 0x1f }} {{ 0o17 }} {{ 0b101 }} {{ 1.5e3 }} {{ 2.50 }} {{ 1e-7 }} {{ 1e22 }} {{ .5 if false else 0.1 }}",
    "{{ true }} {{ True }} {{ none }} {{ None }} {{ false }}",
    "{{ [1, 'a', none, true, 1.5, [2], {'k': 'v'}] }}",
    "{{ (1,) }} {{ () }} {{ (1, 2) }} {{ {'a': 1, 2: 'b', none: 3} }}",
    "{{ 'it\\'s' }} {{ ['it\\'s', \"q\\\"\", 'both\\'\"', '\\n\\x00\\x7f\\xa0\\u2028'] }}",
    "{{ 'ab' 'cd' }}",
    # arithmetic
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 % 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ -2 ** 2 }}",
    "{{ 1 / 2 }} {{ 4 / 2 }} {{ 0.1 + 0.2 }} {{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ 10 - -3 }} {{ +5 }}",
    "{{ 'ab' + 'cd' }} {{ [1] + [2, 3] }} {{ 'x' * 3 }} {{ 3 * 'y' }} {{ [0] * 2 }} {{ 'a' ~ 1 ~ none ~ true }}",
    "{{ 1 + 'a' }}", "{{ 'a' + 1 }}", "{{ 1 / 0 }}", "{{ 5 % 0 }}", "{{ 'a' - 'b' }}",
    "{{ 100000 * 100000 }} {{ 3 * 1.5 }} {{ true + 1 }} {{ 7 // 2.0 }}",
    "{{ '%s and %d' % ('x', 3) }} {{ '%05.1f|%-4s|%x' % (3.14159, 'ab', 255) }} {{ '%(a)s' % {'a': 1} }} {{ '%%' % () }}",
    # comparisons and logic
    "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}",
    "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 'x' in undefined_thing }}",
    "{{ 1 < 'a' }}", "{{ none < 1 }}", "{{ 1 in none }}",
    "{{ 0 or 'b' }} {{ 'a' and 'b' }} {{ '' and 'x' }} {{ not 0 }} {{ not [] }} {{ [] or none }}",
    "{{ 'y' if 1 > 2 else 'n' }} {{ 'y' if true }}|{{ 'y' if false }}|",
    # undefined semantics
    "{{ missing }}|{{ missing is defined }}|{{ missing|length }}|{{ missing ~ 'x' }}|{% for x in missing %}{% endfor %}ok",
    "{{ missing.attr }}", "{{ missing[0] }}", "{{ missing + 1 }}", "{{ missing() }}", "{{ missing < 1 }}",
    "{{ missing == missing }} {{ missing == none }} {{ missing|default('d') }} {{ none|default('d') }} {{ ''|default('d', true) }}",
    "{{ none.x }}|{{ (none.x) is defined }}|{{ {'a': 1}.b }}|{{ {'a': 1}['b'] is undefined }}",
    "{% if missing %}t{% else %}f{% endif %}{% if not missing %}!{% endif %}",
    "{{ x.y }}", "{{ [1][5] }}|{{ 'ab'[9] }}|{{ {}['k'] }}|",
    "{{ (missing or 'fallback') }} {{ missing|d('z') }}",
    # attribute / item access and methods
    ("{{ msgs[0].role }} {{ msgs[0]['content'] }} {{ msgs[-1].content }} {{ msgs|length }} {{ msgs[1].tool_calls }}",
     {"msgs": MSGS}),
    ("{{ d.items is callable }}|{{ d['items'] }}|{{ d.keys()|list }}|{{ d.get('x') }}|{{ d.get('zz', 5) }}|{{ d.values()|list }}",
     {"d": {"x": 1, "items": "key-not-method"}}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
     {"d": {"b": 1, "a": [1, 2]}}),
    "{{ 'Hello World'.lower() }} {{ 'abc'.upper() }} {{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '  a '.lstrip() }}|{{ ' a  '.rstrip() }}|",
    "{{ 'a,b,,c'.split(',') }} {{ ' a  b c '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'x'.split('x') }}",
    "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('lo', 'x')) }} {{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'h\u00e9llo'.find('l') }} {{ 'hello'.count('l') }}",
    "{{ 'a-b-c'.replace('-', '+') }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ ', '.join(['a', 'b']) }}",
    "{{ 'abc'.isalpha() }} {{ '123'.isdigit() }} {{ 'abc'.islower() }} {{ ' '.isspace() }} {{ '42'.zfill(5) }} {{ 'ab'.center(6, '*') }} {{ 'ab'.ljust(4) }}|",
    "{{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'k=v=w'.partition('=') }} {{ 'prefix_x'.removeprefix('prefix_') }}",
    "{{ [1, 2, 2].count(2) }} {{ [1, 2, 3].index(3) }} {{ (1, 2).index(2) }}",
    "{{ 'abc'[0] }} {{ 'abc'[-1] }} {{ 'abcdef'[1:4] }} {{ 'abcdef'[::2] }} {{ 'abc'[::-1] }} {{ 'h\u00e9llo'[1] }} {{ 'h\u00e9llo'[::-1] }}",
    "{{ [1, 2, 3, 4][1:] }} {{ [1, 2, 3, 4][:-1] }} {{ [1, 2, 3, 4][::-2] }} {{ [1, 2, 3][5:] }} {{ (1, 2, 3)[1:] }} {{ [1, 2][-5:1] }}",
    "{{ [].append }}", "{{ [].append(1) }}", "{{ {}.update({'a': 1}) }}", "{{ 'x'.__class__ }}|{{ ''.__class__.__mro__ }}",
    "{{ ().__class__.__base__.__subclasses__() }}",
    "{{ {'a': 1}.pop('a') }}",
    # filters
    "{{ 'x'|upper }} {{ 'X'|lower }} {{ 'hello world-wide (x)'|title }} {{ 'hELLO wORLD'|capitalize }} {{ '  t  '|trim }}|{{ 'xxtxx'|trim('x') }}",
    "{{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }}",
    ("{{ users|sort(attribute='age')|map(attribute='name')|join(', ') }}|{{ users|map(attribute='name')|list }}|{{ users|selectattr('admin')|map(attribute='name')|list }}",
     {"users": [{"name": "Ann", "age": 31, "admin": True}, {"name": "bob", "age": 25, "admin": False}, {"name": "Cy", "age": 40}]}),
    ("{{ users|rejectattr('admin')|list|length }}|{{ users|selectattr('age', 'gt', 30)|list|length }}|{{ users|selectattr('name', 'equalto', 'Cy')|first }}|{{ users|map(attribute='missing', default='?')|join }}",
     {"users": [{"name": "Ann", "age": 31, "admin": True}, {"name": "bob", "age": 25, "admin": False}, {"name": "Cy", "age": 40}]}),
    "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('even')|list }} {{ [0, 1, '', 'a']|select|list }} {{ [1, 2]|map('string')|join('-') }}",
    "{{ ['a', 'b']|map('upper')|list }} {{ [-1, 2]|map('abs')|list }} {{ [1.55, 2.5]|map('round', 1)|list }}",
    "{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} {{ []|first }}|{{ {'a': 1, 'b': 2}|first }} {{ {'a': 1, 'b': 2}|last }}",
    "{{ [1, 2, 3]|length }} {{ 'h\u00e9llo'|length }} {{ {'a': 1}|count }} {{ [1, 2]|join }} {{ [1, none, 'x']|join('|') }}",
    "{{ [3, 1, 3, 1]|unique|list }} {{ ['a', 'A', 'b']|unique|list }} {{ ['a', 'A']|unique(case_sensitive=true)|list }}",
    "{{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }} {{ [1, 2]|reverse|join }}|{{ (1, 2)|reverse|list }}",
    "{{ {'b': 1, 'a': 2}|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value', reverse=true) }} {{ {'b': 1, 'a': 2}|items|list }}",
    "{{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '0x1A'|int(base=16) }} {{ ' 12 '|int }} {{ true|int }}",
    "{{ '1.5'|float }} {{ 'x'|float }} {{ 2|float }} {{ '1e3'|float }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }} {{ 7|round }}",
    "{{ -3|abs }} {{ -2.5|abs }} {{ [1, 2, 3]|sum }} {{ [1.5, 2]|sum }} {{ [[1], [2]]|sum(start=[]) }} {{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ ['b', 'A']|max }}",
    "{{ 5|string ~ 1 }} {{ [1, 'a']|string }} {{ none|string }} {{ {'a': none}|string }}",
    "{{ '<a href=\"x\">&\'</a>'|escape }} {{ '<b>'|e }} {{ '<i>'|safe }}",
    "{{ 'one two  three'|wordcount }} {{ 'abc'|center(9) }}| {{ '%s=%s'|format('k', 'v') }} {{ '%(x)s!'|format(x=1) }}",
    "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(first=true, blank=true) }}|{{ 'x\\n'|indent('> ') }}|",
    "{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 'x')|list }}",
    "{{ 'hello world foo bar'|truncate(9) }}|{{ 'hello world foo bar'|truncate(9, true) }}|{{ 'short'|truncate(10) }}",
    "{{ [1, 2]|map('upper') is iterable }}|{{ ([1, 2]|select('odd'))|length }}",
    "{{ 'abc'|list }} {{ {'a': 1}|list }} {{ none|list }}",
    "{{ {'a': 1}|attr('a') }}|{{ 'x'|attr('upper') is defined }}",
    "{% filter upper %}hello {{ 'x' }}{% endfilter %}|{% filter trim|replace('a', 'b') %}  aaa  {% endfilter %}",
    # tojson (HF's version)
    "{{ {'a': 'é\u2028<>&\\'\"', 'b': [1, 2.5, none, true]}|tojson }}",
    "{{ {'b': {'c': [1, {}], 'd': []}, 'a': 1}|tojson(indent=2) }}",
    "{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} {{ [1, 2]|tojson(separators=(',', ':')) }} {{ 'é'|tojson(ensure_ascii=true) }} {{ '\\x01\\t\\u007f'|tojson }}",
    "{{ {1: 'a', none: 'b', true: 'c', 1.5: 'd'}|tojson }} {{ (1, 2)|tojson }} {{ 1e20|tojson }} {{ 0.1|tojson }} {{ 'x'|tojson(indent='\\t') }}",
    "{{ {'a': [1, 2]}|tojson(indent=0) }}", "{{ missing|tojson }}", "{{ {'k': missing}|tojson }}", "{{ {(1, 2): 3}|tojson }}",
    ("{{ tools|tojson }}", {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}]}),
    ("{{ data|tojson }}|{{ data|string }}", {"data": {"int": 1, "float": 1.0, "big": 12345678901234567, "neg": -0.0, "exp": 1.5e-7, "s": "\u00e9\n"}}),
    # tests
    "{{ 1 is odd }} {{ 2 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ none is none }} {{ 1 is number }} {{ true is number }}",
    "{{ true is boolean }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is mapping }}",
    "{{ [] is iterable }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ missing is iterable }} {{ {} is sequence }} {{ 'x' is sequence }} {{ 1 is sequence }}",
    "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ range is callable }} {{ 'x' is callable }}",
    "{{ 1 is eq 1 }} {{ 1 is ne 2 }} {{ 2 is gt 1 }} {{ 2 is ge 2 }} {{ 1 is lt 2 }} {{ 1 is le 0 }} {{ 2 is in [1, 2] }} {{ 1 is equalto 1.0 }} {{ 1 is sameas 1 }} {{ none is sameas none }}",
    "{{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }} {{ x is not defined }} {{ 1 is not string }}",
    "{{ missing is odd }}",
    # loops
    "{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
    "{% for x in ['a', 'b', 'c'] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}|{{ loop.cycle('odd', 'even') }} {% endfor %}",
    "{% for x in [] %}x{% else %}empty{% endfor %} {% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.index }}/{{ loop.length }} {% endfor %}",
    "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %} {% for a, b in {'x': 1}.items() %}{{ a }}{{ b }}{% endfor %}",
    "{% for a, b in [(1, 2, 3)] %}{% endfor %}", "{% for a, b in [1] %}{% endfor %}", "{% for x in 5 %}{% endfor %}", "{% for x in none %}{% endfor %}",
    "{% for x in 'ab' %}{{ x }}{% endfor %} {% for i in range(3, 0, -1) %}{{ i }}{% endfor %} {% for i in range(0, 10, 3) %}{{ i }}{% endfor %}",
    "{% for row in [[1, 2], [3]] %}{% for c in row %}{{ loop.index }}{{ c }}{% endfor %}/{{ loop.index }} {% endfor %}",
    "{% for x in [1, 2] %}{% set y = x * 10 %}{{ y }}{% endfor %}{{ y }}|{% set z = 0 %}{% for x in [1] %}{{ z }}{% set z = 5 %}{{ z }}{% endfor %}{{ z }}",
    "{% for x in [1, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}",
    "{{ loop }}|{% for x in [1] %}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}",
    "{% break %}",
    # set, namespaces, scoping
    "{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t = 1, 2 %}{{ t }} {% set s %}inner {{ a }}{% endset %}[{{ s }}] {% set u | upper %}up{% endset %}{{ u }}",
    "{% set ns = namespace(a=1, b=[]) %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }} {{ ns.b }} {{ ns }}",
    "{% set ns = namespace() %}{% set ns.x = 'v' %}{{ ns.x }}{{ ns['x'] }}{{ ns.missing is defined }}",
    "{% set ns = namespace(_private=1) %}", "{% set ns = namespace() %}{% set ns._x = 1 %}", "{% set d = {} %}{% set d.x = 1 %}",
    "{% if true %}{% set leak = 'yes' %}{% endif %}{{ leak }}",
    "{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% for i in range(1) %}{% set x = 2 %}{{ m() }}{% endfor %}{{ m() }}",
    "{% set x = 5 %}{% macro m() %}{{ x }}{% endmacro %}{{ m() }}{% set x = 6 %}{{ m() }}",
    "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}|",
    "{% set d = dict(a=1, b='x') %}{{ d }} {{ dict([('k', 1)], z=2) }} {{ dict({'m': 1}) }}",
    "{% set messages = [1, 2] %}{{ messages|length }}",
    # macros and call blocks
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bo', punct='?') }} {{ greet(name='Cy') }} {{ greet() }}|",
    "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=1) }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, a=2) }}",
    "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}",
    "{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}inside {{ 1 + 1 }}{% endcall %}",
    "{% macro list_items(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(item) list_items([1, 2]) %}<{{ item }}>{% endcall %}",
    "{{ m }}{% macro m() %}x{% endmacro %}|{{ m }}|{{ m is callable }}",
    "{% macro outer() %}{% macro inner() %}in{% endmacro %}{{ inner() }}-out{% endmacro %}{{ outer() }}",
    "{% macro m() %}{% set x = 'local' %}{{ x }}{% endmacro %}{% set x = 'global' %}{{ m() }}{{ x }}",
    # globals
    "{{ range(3)|list }} {{ range(1, 4)|list }} {{ range(5)|length }} {{ range(0)|list }}",
    "{{ range(100001)|length }}", "{{ raise_exception('custom failure: ' ~ 42) }}", "{{ strftime_now('%Y-%m-%d %H:%M %A %B %d %b %j') }}",
    "{% if true %}{{ raise_exception('boom') }}{% endif %}",
    # generation block (HF AssistantTracker)
    "{% generation %}gen {{ 1 }}{% endgeneration %}|",
    # more whitespace-control corner cases
    "  {% if true %}a{% endif %}",
    "x {% if true %}a{% endif %}\n  y {% if true %}b{% endif %}",
    "\t \t{% if true %}\n\tz\n\t{% endif %}\n",
    "a\n{{- 'b' }}\n{{ 'c' -}}\n\n d",
    "{%- raw %} r {% endraw %}|\n  {%+ raw %}  q{% endraw -%}  \n|{% raw -%}\n  p\n{%- endraw %}",
    "\u3000{% if true %}x{% endif %}\u00a0\n{%- if true %}y{% endif %}",
    "{{ '%}' }}{{ \"}}\" }}{% set x = '{%' %}{{ x }}{{ '#}' }}{{ {'a': {'b': 1}} }}",
    "{{\n  'multi'\n  ~ 'line'\n}}{%\n  if true\n%}!{%\n endif\n%}",
    "abc\n\n", "abc\n", "\n", "{% if true %}\n{% endif %}\n",
    "{# a #}{# b #}\n{# c #}  \n  d",
    "{% for i in [1, 2] -%}\n  [{{ i }}]\n{%- endfor %}",
    "{% macro m() -%}\n  body\n{%- endmacro %}<{{ m() }}>",
    "  {%- set x = 1 %}\n  {{ x }}",
    # numbers printed the Python way
    "{{ 1.0 }} {{ 1e100 }} {{ 123456789.123 }} {{ 1/3 }} {{ -0.0 }} {{ 2**62 }} {{ 10**15 * 1.0 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 5e-324 }}",
    "{{ '%.2f'|format(3.14159) }} {{ '%5s|%-5s|'|format('a', 'b') }} {{ '%+d %+d'|format(5, -5) }} {{ '%e'|format(12345.678) }} {{ '%g %g'|format(0.0001, 1234567) }} {{ '%c'|format(65) }} {{ '%r'|format('x') }} {{ '%s'|format([1, 'a']) }} {{ '%d%%'|format(50) }} {{ '%x %X %o %#x'|format(255, 255, 8, 255) }}",
    "{{ 'abc' * 0 }}|{{ [1] * -1 }}|{{ {'a': 1, 'a': 2} }}|{{ {'a': 1} == {'a': 1.0} }}|{{ [1, 2] == (1, 2) }}|{{ none in [none] }}",
    ("{{ foo.bar is defined }}|{{ foo.missing|default('x') }}|{{ (foo.x or {}).y }}|{{ 'a' if foo is defined else 'b' }}|{{ foo.bar.baz }}",
     {"foo": {"bar": {"baz": [1, 2]}}}),
    ("{% for m in messages %}{% set content = m.content if m.content is string else m.content[0].text %}{{ content }};{% endfor %}",
     {"messages": [{"content": "plain"}, {"content": [{"type": "text", "text": "part"}, {"type": "image"}]}]}),
    ("{% for m in messages %}{% if m.content is not string %}{% for p in m.content %}{% if p.type == 'text' %}{{ p.text }}{% elif p['type'] == 'image' %}<img>{% endif %}{% endfor %}{% endif %}{% endfor %}",
     {"messages": [{"content": [{"type": "image"}, {"type": "text", "text": "caption"}]}]}),
    "{{ [1.0, 1e-05, 1e20, 3.14]|tojson }} {{ {'x': 1.0}|tojson(indent=4) }}",
    "{{ 'x'|indent(4) }}|{{ ''|indent }}|{{ 'a\r\nb\rc'|indent(1) }}|",
    "{% for c in 'h\u00e9\U0001F600' %}[{{ c }}]{% endfor %}",
    "{{ \"they're bill's\"|title }} {{ \"they're bill's\".title() }} {{ '  a  b  '|wordcount }} {{ 'snake_case word'|title }}",
    "{{ 'stra\u00dfe'|upper }} {{ 'STRASSE'|lower }} {{ '\u0130'|lower|length }} {{ '\u01c5'|lower }} {{ '\u01c6'|upper }} {{ '\u00e9cole'|capitalize }}",
    "{{ 'Stra\u00dfe'|length }} {{ 'x\u0301'|length }}",
    "{% macro r(n) %}{% if n > 0 %}{{ r(n - 1) }}{% endif %}{{ n }}{% endmacro %}{{ r(40) }}",
    "{% set outer = namespace(i=0) %}{% for a in [1, 2] %}{% set outer_loop = loop %}{% for b in [1, 2] %}{{ outer_loop.index }}{{ loop.index }} {% endfor %}{% endfor %}",
    ("{% for k, v in d|dictsort %}{{ k }}={{ v|join(',') }};{% endfor %}", {"d": {"z": [1, 2], "a": ["x"]}}),
    ("{{ messages[1:]|length }} {{ messages[-1]['role'] }} {{ (messages|last).role }} {{ messages|selectattr('role', 'equalto', 'user')|list|length }}",
     {"messages": MSGS}),
    "{{ [3, 2, 1]|sort|first }} {{ [[2, 'b'], [1, 'a']]|sort|first }} {{ [{'a': 2}, {'a': 1}]|sort(attribute='a')|map(attribute='a')|join }}",
    "{{ ['b', 1]|sort }}", "{{ [[1], 'a']|sort }}", "{{ {'a': 1}|first is string }}",
    "{{ x | default('none given') }} {{ x | default }}|{{ none | default('n') }}",
    "{{ [1, [2, [3]]]|tojson }} {{ [1, 2, 3][1] }} {{ [1, 2, 3].1 }} {{ {'0': 'str'}.0 is defined }}",
    "{% if [] %}a{% elif {} %}b{% elif 0.0 %}c{% elif '' %}d{% elif none %}e{% else %}f{% endif %}",
    "{% set x = [1, 2, 3] %}{{ x[1:] + x[:1] }} {{ x|reject('equalto', 2)|list }} {{ x|select('in', [1, 3])|list }} {{ x|map('string')|map('int')|sum }}",
    "{{ 'a' ~ [1] ~ {'k': none} ~ (1,) }}",
    "{{ 'x' if none else 'y' if 0 else 'z' }}",
    "{{ 3 is divisibleby 0 }}", "{{ 'abc' is odd }}",
    "{{ 'a' < none }}",
    "{{ [1, 2]|join(', ', attribute='x') }}",
    "{% for x in [1, 2] %}{{ x }}{% else %}no{% endfor %}",
    "{{ 'abc'.split('') }}",
    "{{ ','.join([1, 2]) }}",
    "{{ 'a'.startswith(1) }}",
    "{% set n = namespace(items=[]) %}{% for i in range(3) %}{% set n.items = n.items + [i] %}{% endfor %}{{ n.items }}",
    "{{ range(3, 10, 3)|list }} {{ range(10, 0, -4)|list }} {{ range(-3)|list }}",
    "{{ range(1.5) }}", "{{ range(0, 10, 0) }}",
    "{{ dict(a=1).items()|list }} {{ dict() }} {{ namespace(x=1).x }}",
    "{{ loop.index }}", "{{ caller() }}",
    "{% macro m(x) %}{{ x is defined }}{% endmacro %}{{ m() }}{{ m(none) }}",
    "{% macro m(a, b=a ~ '!') %}{{ b }}{% endmacro %}{{ m('hi') }}",
    "{{ 'x'|replace('', '-') }} {{ 'abc'|replace('b', '') }} {{ 5|replace('5', 'five') }}",
    "{{ [none, 0, false, ''] | select('none') | list }} {{ [none, 1] | reject('none') | list }}",
    "{{ {'a': 1, 'b': 2}|dictsort(true, 'value') }} {{ {'B': 1, 'a': 2}|dictsort }} {{ {'B': 1, 'a': 2}|dictsort(case_sensitive=true) }}",
    "{{ [1, 2, 3]|batch(2)|map('sum')|list }}",
    "{{ ['a', 'B', 'c']|max }} {{ ['a', 'B', 'c']|min(case_sensitive=true) }} {{ []|max }}|{{ [{'x': 3}, {'x': 1}]|max(attribute='x') }}",
    "{{ 'a\\tb'|trim }} {{ '\\u3000x\\u3000'|trim|length }} {{ 'xyx'.strip('xy') }}|",
    "{{ 'Hello'[1:3]|upper }} {{ ('a', 'b')|join }} {{ 'ab'|list|join('.') }}",
    # Markup (|safe, |escape): `+` and `%` escape plain strings, methods keep Markup
    "{{ '<|im_start|>' + 'x'|safe + '<|im_end|>' }}|{{ ('<b>'|safe) ~ '<i>' }}|{{ ('<b>'|safe).upper() }}|{{ ('a%s'|safe) % '<' }}",
    "{{ '<'|escape + '<' }}|{{ ('<b>'|safe)|replace('b', '<') }}|{{ ('<b>'|safe) * 2 }}|{{ ('<b>'|safe).split('b') }}|{{ ('<b>'|safe)|string + '<' }}|{{ ('<b>'|safe)|title + '<' }}",
    ("{{ [x|safe, x|e] }}|{{ x|safe is escaped }}{{ x is escaped }}|{{ (x|safe).replace('i', '<') }}|{{ ('<'|safe).join(['<a>', x|safe]) }}|{{ x|e|e }}|{{ x|forceescape|forceescape }}",
     {"x": "<i>"}),
    # quirks found by differential testing
    "{{ 1 // 0.1 }} {{ -7.5 // 2 }} {{ 7 // -2.0 }} {{ 0.0 // 3 }}",
    "{{ missing|last }}|{{ [1, 2]|batch(1)|list|truncate(5) }}|{{ 0|map('string')|list }}|{{ none|map(attribute='x')|list }}",
    "{{ 'ab'|sort(attribute='v') }} {{ [3, 1]|sort(attribute='v') }} {{ 'ab'|map(attribute='v')|list }}",
    "{{ '' % [] }}|{{ '%s' % [1] }}|{{ 'x' % {} }}",
    "{% if false %}{{ x|nosuchfilter }}{{ y is nosuchtest }}{% endif %}{{ 1 if true else 2|nosuchfilter }}ok",
    "{% if true %}{{ x|nosuchfilter }}{% endif %}",
    "{% if a %}{% for x in y %}{{ x|nosuch }}{% endfor %}{% endif %}",
    "{% set y %}{% set z = 1 %}{% macro mm() %}{% endmacro %}{% endset %}[{{ z }}]{{ mm is defined }}",
    "{% filter upper %}{% set z = 1 %}{% endfilter %}[{{ z }}]",
    "{% set x = [1, 2, 3] %}{{ x[1:] }}{{ x[:'a'] }}", "{% set x = 5 %}{{ x[1:] }}", "{% set x = {'a': 1} %}{{ x[:1] }}", "{{ missing[1:] }}",
    # str.format through the sandboxed formatter
    "{{ '{} and {}'.format(1, 'a') }}|{{ '{0}{1}{0}'.format('x', 'y') }}|{{ '{name}!'.format(name='n') }}|{{ '{:>8}|{:<8}|{:^8}|'.format('r', 'l', 'c') }}|{{ '{:*^9}'.format('mid') }}",
    "{{ '{:05d} {:+d} {: d} {:x} {:#x} {:#o} {:b} {:,}'.format(42, 5, 7, 255, 255, 8, 5, 1234567) }}|{{ '{:.2f} {:.3} {:e} {:g} {:%} {:10.1f}|'.format(3.14159, 1234.5678, 0.00012, 1e-5, 0.25, -2.55) }}",
    "{{ '{} {} {}'.format(1.0, 1e20, 0.1) }}|{{ '{!r} {!s}'.format('q', [1]) }}|{{ '{0[0]} {1.k} {1[k]}'.format(['a'], {'k': 'v'}) }}|{{ '{{x}} {}'.format(1) }}|{{ '{:{w}}|'.format('x', w=5) }}",
    "{{ '{:06.2f}|{:=+8d}|{:08}'.format(-3.14159, 42, -5) }} {{ '{:_}'.format(1234567.5) }} {{ '{:,.2f}'.format(1234567.891) }} {{ '{}'.format(none) }} {{ '{:d}'.format(true) }}",
    "{{ '{} {}'.format(1) }}", "{{ '{.__class__}'.format('') }}", "{{ '{:>5}'.format(none) }}",
    "{{ 'x' % missing }}|{{ '%s|' % missing }}|{{ '%r' % missing }}|{{ ('%s'|safe) % missing }}|{{ 'abc'[2::9223372036854775807] }}",
    "{{ '%d' % missing }}", "{{ '%(a)s' % missing }}",
    # syntax errors and unsupported constructs
    "{% if %}", "{% for x in %}{% endfor %}", "{{ 1 +* 2 }}", "{% endif %}", "{% if true %}", "{{ x|nosuchfilter }}",
    "{{ x is nosuchtest }}", "{% include 'other.html' %}", "{% extends 'base' %}", "{% import 'x' as y %}", "{{ 'unterminated }}",
    "{{ (1 }}", "{{ [1, 2 }}", "{# unclosed comment", "{% raw %}no end", "{{ }}", "{{ 1 2 }}",
    "{% set 1 = 2 %}", "{% macro m(a=1, b) %}{% endmacro %}", "{% do x %}",
]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
            },
            "required": ["location"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_web",
        "description": "Search the web and return the top results.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to search for"},
                "max_results": {"type": "integer", "description": "How many results", "default": 5,
                                "minimum": 1, "maximum": 20},
                "filters": {
                    "type": "object",
                    "description": "Optional filters",
                    "properties": {
                        "site": {"type": "string", "description": "Restrict to this site"},
                        "recent": {"type": "boolean", "description": "Only recent pages"},
                    },
                },
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags to match"},
                "score": {"type": "number", "description": "Minimum score \u2265 0.5"},
            },
            "required": ["query"],
        },
    },
}
TOOLSETS = {
    "weather": [WEATHER_TOOL],
    "weather_search": [WEATHER_TOOL, SEARCH_TOOL],
}

SYS = {"role": "system", "content": "You are a helpful assistant."}
CONVERSATIONS = {
    "basic": [SYS, {"role": "user", "content": "Hello! What's 2+2?"},
              {"role": "assistant", "content": "2 + 2 = 4."}, {"role": "user", "content": "And 3*3?"}],
    "no_system": [{"role": "user", "content": "Hi there."}, {"role": "assistant", "content": "Hello! How can I help?"},
                  {"role": "user", "content": "Tell me a joke."}],
    "single_user": [{"role": "user", "content": "Hi"}],
    "unicode_and_markup": [
        {"role": "system", "content": "Tu es un assistant serviable. \u65e5\u672c\u8a9e\u3067\u3082OK \U0001F642"},
        {"role": "user", "content": "He said \"hi\" and 'bye' \\ back\\slash\n{{ not_a_var }} {% raw %} <b>&amp;</b>\ttab"},
        {"role": "assistant", "content": "  Sure:\n- one\n- two  \n\n"},
        {"role": "user", "content": "  padded question?  \n"},
    ],
    "tool_call": [
        SYS, {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call00001", "type": "function",
             "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}}}]},
        {"role": "tool", "tool_call_id": "call00001", "name": "get_weather",
         "content": "{\"temperature\": 18, \"condition\": \"cloudy\"}"},
        {"role": "assistant", "content": "It is 18\u00b0C and cloudy in Paris."},
        {"role": "user", "content": "Thanks! And in Tokyo?"},
    ],
    "tool_call_string_args": [
        {"role": "user", "content": "Search for llamas."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_abc_1", "type": "function",
             "function": {"name": "search_web", "arguments": "{\"query\": \"llamas\", \"max_results\": 3}"}}]},
        {"role": "tool", "tool_call_id": "call_abc_1", "content": "1. Llama - Wikipedia"},
    ],
    "parallel_tool_calls": [
        SYS, {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "Checking both.", "tool_calls": [
            {"id": "call00001", "type": "function",
             "function": {"name": "get_weather", "arguments": {"location": "Paris"}}},
            {"id": "call00002", "type": "function",
             "function": {"name": "get_weather", "arguments": {"location": "Rome", "unit": "celsius"}}}]},
        {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "20C sunny"},
        {"role": "tool", "tool_call_id": "call00002", "name": "get_weather", "content": "25C clear"},
    ],
    "prefill": [SYS, {"role": "user", "content": "Write a haiku."},
                {"role": "assistant", "content": "Autumn moonlight -  "}],
    "prefill_blocks": [{"role": "user", "content": "Continue."},
                       {"role": "assistant", "content": [{"type": "text", "text": "Once upon a time"}]}],
    "thinking": [
        SYS, {"role": "user", "content": "Is 17 prime?"},
        {"role": "assistant", "content": "<think>\nCheck divisors up to 4.\n</think>\n\nYes, 17 is prime."},
        {"role": "user", "content": "And 21?"},
        {"role": "assistant", "content": "No: 21 = 3 * 7.", "reasoning_content": "3 * 7 = 21."},
        {"role": "user", "content": "Thanks."},
    ],
}

MODELS = {
    # template file: special tokens as the model's tokenizer exposes them (absent = not defined)
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja": {"bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>"},
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"},
    "Qwen-Qwen2.5-7B-Instruct.jinja": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "Qwen-Qwen3-0.6B.jinja": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": {"bos_token": "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
                                                       "eos_token": "<\uff5cend\u2581of\u2581sentence\uff5c>"},
    "deepseek-ai-DeepSeek-V3.1.jinja": {"bos_token": "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
                                        "eos_token": "<\uff5cend\u2581of\u2581sentence\uff5c>"},
    "google-gemma-2-2b-it.jinja": {"bos_token": "<bos>", "eos_token": "<eos>"},
    "ibm-granite-granite-3.3-2B-Instruct.jinja": {"bos_token": "<|end_of_text|>", "eos_token": "<|end_of_text|>"},
    "meetkai-functionary-medium-v3.2.jinja": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "meta-llama-Llama-3.1-8B-Instruct.jinja": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "microsoft-Phi-3.5-mini-instruct.jinja": {"bos_token": "<s>", "eos_token": "<|endoftext|>"},
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": {"bos_token": "<s>", "eos_token": "</s>"},
    "mistralrs-chatml.jinja": {"eos_token": "<|im_end|>"},
    "mistralrs-llama2-chat.jinja": {"bos_token": "<s>", "eos_token": "</s>"},
    "mistralrs-mistral-instruct-v0.1.jinja": {"bos_token": "<s>", "eos_token": "</s>"},
    "mistralrs-smollm3.jinja": {"eos_token": "<|im_end|>"},
}

# Extra variants: (template, conversation, toolset, extra variables)
EXTRA_VARIANTS = [
    ("Qwen-Qwen3-0.6B.jinja", "thinking", None, {"enable_thinking": False}),
    ("Qwen-Qwen3-0.6B.jinja", "basic", None, {"enable_thinking": True}),
    ("mistralrs-smollm3.jinja", "basic", None, {"enable_thinking": False}),
    ("mistralrs-smollm3.jinja", "tool_call", None, {"xml_tools": [WEATHER_TOOL, SEARCH_TOOL]}),
    ("mistralrs-smollm3.jinja", "basic", None, {"python_tools": [WEATHER_TOOL], "enable_thinking": False}),
    ("deepseek-ai-DeepSeek-V3.1.jinja", "thinking", None, {"thinking": True}),
    ("ibm-granite-granite-3.3-2B-Instruct.jinja", "no_system", None, {"thinking": True}),
    ("ibm-granite-granite-3.3-2B-Instruct.jinja", "no_system", "weather",
     {"documents": [{"doc_id": 1, "title": "Weather", "text": "Paris is mild."},
                    {"doc_id": "b", "text": "Rome is warm."}], "controls": {"citations": True, "hallucinations": True}}),
    ("meta-llama-Llama-3.1-8B-Instruct.jinja", "tool_call", "weather", {"tools_in_user_message": False}),
    ("meta-llama-Llama-3.1-8B-Instruct.jinja", "basic", None,
     {"builtin_tools": ["code_interpreter", "brave_search", "wolfram_alpha"], "date_string": "15 Jan 2025"}),
    ("meta-llama-Llama-3.1-8B-Instruct.jinja", "no_system", None, {"custom_tools": [SEARCH_TOOL]}),
    ("meetkai-functionary-medium-v3.2.jinja", "basic", "weather_search", {}),
    ("Qwen-Qwen2.5-7B-Instruct.jinja", "basic", "weather_search", {}),
    ("Qwen-Qwen3-0.6B.jinja", "no_system", "weather", {}),
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "basic", "weather_search", {}),
    ("CohereForAI-c4ai-command-r-plus-tool_use.jinja", "basic", None, {}),
]

# Tool-use templates iterate `tools` unconditionally, so every conversation gets some.
DEFAULT_TOOLSET = {"CohereForAI-c4ai-command-r-plus-tool_use.jinja": "weather_search",
                   "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": "weather_search"}
TOOLSET_FOR = {"tool_call": "weather_search", "tool_call_string_args": "weather_search",
               "parallel_tool_calls": "weather"}


def build_chat_cases(template_dir):
    cases = []
    check = {"compared": 0, "mismatches": []}

    def add(tname, conv, toolset, agp, extra, cfm=False):
        text = open(os.path.join(template_dir, tname), encoding="utf-8").read()
        msgs = CONVERSATIONS[conv]
        tools = TOOLSETS[toolset] if toolset else None
        if cfm:
            out, etype, emsg = render_continue_final(text, msgs, tools, extra)
        else:
            out, etype, emsg = render(text, chat_context(msgs, tools, agp, extra))
        case = {"template": tname, "conversation": conv, "toolset": toolset, "add_generation_prompt": agp,
                "extra_vars": extra}
        if cfm:
            case["continue_final_message"] = True
        if etype is None:
            case["expected"] = out
        else:
            case["error_type"], case["error"] = etype, emsg
        cases.append(case)
        hf = render_with_transformers(text, msgs, tools, agp, extra, cfm)
        if hf is not None:
            check["compared"] += 1
            mine = ("ok", out) if etype is None else ("error", emsg)
            if hf[0] == "error" and mine[0] == "error" and cfm:
                return  # messages differ in wording only
            if hf != mine:
                check["mismatches"].append((tname, conv, agp, hf, mine))

    for tname in sorted(MODELS):
        for conv in CONVERSATIONS:
            for agp in (True, False):
                toolset = TOOLSET_FOR.get(conv) or DEFAULT_TOOLSET.get(tname)
                add(tname, conv, toolset, agp, dict(MODELS[tname]))
    for tname, conv, toolset, extra in EXTRA_VARIANTS:
        for agp in (True, False):
            add(tname, conv, toolset, agp, {**MODELS[tname], **extra})
    for tname in sorted(MODELS):  # prefill: continue the final assistant message
        for conv in ("prefill", "prefill_blocks"):
            add(tname, conv, DEFAULT_TOOLSET.get(tname), False, dict(MODELS[tname]), cfm=True)
    return cases, check


def build_snippet_cases():
    cases = []
    for item in SNIPPETS:
        text, ctx = (item, {}) if isinstance(item, str) else item
        out, etype, emsg = render(text, ctx)
        case = {"template": text, "context": ctx}
        if etype is None:
            case["expected"] = out
        else:
            case["error_type"], case["error"] = etype, emsg
        cases.append(case)
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--templates", default=os.path.join(ROOT, "..", "shared", "testdata", "chat_templates"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/data/chat/golden.json"))
    args = ap.parse_args()

    hashes = {}
    for tname in sorted(MODELS):
        data = open(os.path.join(args.templates, tname), "rb").read()
        hashes[tname] = hashlib.sha256(data).hexdigest()
    chat_cases, check = build_chat_cases(args.templates)
    if check["mismatches"]:
        for m in check["mismatches"][:5]:
            print("MISMATCH vs transformers:", m, file=sys.stderr)
        sys.exit(f"{len(check['mismatches'])} cases differ from transformers' own rendering")
    golden = {
        "generator": "scripts/gen_chat_golden.py",
        "jinja2_version": jinja2.__version__,
        "transformers_cross_checked_cases": check["compared"],
        "now": FIXED_NOW.isoformat(),
        "template_sha256": hashes,
        "conversations": CONVERSATIONS,
        "toolsets": TOOLSETS,
        "chat_cases": chat_cases,
        "snippet_cases": build_snippet_cases(),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for c in chat_cases if "error" in c)
    print(f"wrote {args.out}: {len(chat_cases)} chat cases ({n_err} raise), "
          f"{len(golden['snippet_cases'])} snippets; {check['compared']} cross-checked with transformers")


if __name__ == "__main__":
    main()
