#!/usr/bin/env python3
"""The chat templates' Jinja interpreter (engine/chat/jinja*.c) against Python's jinja2.

Templates are rendered by jinja2 in Hugging Face's environment (apply_chat_template's:
an ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loop controls and the
generation tag; tojson as json.dumps; raise_exception and strftime_now) and by jinja_render,
with the same variables (the JSON that jinja_render reads, loaded back for jinja2 so that
both see the same numbers). The outputs must be the same bytes; where jinja2 raises,
jinja_render must fail too. Three sets:

  (a, b) every template of engine/synth/templates/*.jinja over random conversations (roles, unicode
         contents with quotes, newlines and </think>, reasoning, tool calls, tools,
         add_generation_prompt, enable_thinking, bos/eos tokens), a fixed seed;
  (c)    small templates, one per construct, filter, test and method, over random inputs;
  (d)    random layouts of text, whitespace and tags with '-'/'+' controls (the lexer).

    check_jinja.py --render build/tests/jinja_render --templates engine/synth/templates [--count N]
"""
import argparse
import datetime
import glob
import json
import os
import random
import subprocess
import sys
import tempfile

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("skip: check_jinja: this Python has no jinja2 (apt install python3-jinja2)")
    print("0 passed, 0 failed")
    sys.exit(77)


class AssistantTracker(Extension):
    """Hugging Face's {% generation %}: renders its body (the mask it records is not needed)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_generation_support")
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def hf_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = hf_environment()


class Renderer:
    def __init__(self, binary, workdir):
        self.binary = binary
        self.tpl = os.path.join(workdir, "template.jinja")
        self.vars = os.path.join(workdir, "vars.json")
        self.cached = None
        self.compiled = {}   # source: jinja2's template, or the error compiling it raised

    def python(self, source, variables):
        # jinja2 compiles a template to Python: once per source, not per render (that was
        # nine tenths of this check's time)
        if source not in self.compiled:
            try:
                self.compiled[source] = ENV.from_string(source)
            except Exception as e:  # jinja2 raises many kinds; any of them is a failure
                self.compiled[source] = e
        template = self.compiled[source]
        if isinstance(template, Exception):
            return False, f"{type(template).__name__}: {template}"
        try:
            return True, template.render(**variables)
        except Exception as e:
            return False, f"{type(e).__name__}: {e}"

    def c(self, source, text_vars):
        if self.cached != source:
            with open(self.tpl, "w", encoding="utf-8", newline="") as f:
                f.write(source)
            self.cached = source
        with open(self.vars, "w", encoding="utf-8") as f:
            f.write(text_vars)
        p = subprocess.run([self.binary, self.tpl, self.vars], capture_output=True, timeout=60)
        if p.returncode not in (0, 1):
            return False, f"exit {p.returncode}: {p.stderr.decode(errors='replace')}"
        if p.returncode == 1:
            return False, p.stderr.decode(errors="replace").strip()
        return True, p.stdout.decode("utf-8", errors="surrogateescape")

    def compare(self, source, variables):
        """(same, python's result, C's result)."""
        text = json.dumps(variables, ensure_ascii=False)
        want = self.python(source, json.loads(text))
        got = self.c(source, text)
        crashed = not got[0] and got[1].startswith("exit ")
        same = not crashed and want[0] == got[0] and (not want[0] or want[1] == got[1])
        return same, want, got


# ---- random data --------------------------------------------------------------------------

PIECES = ["hello", "world", " ", "  ", "\n", "\n\n", "\t", "'", '"', "\\", "é", "ß", "中文",
          "😀", "ΑΣ", "ς", "İ", "ǅ", "</think>", "<think>", "<tool_response>", "</tool_response>",
          "{{", "{%", "#}", "<|im_end|>", "x", "A", "7", "-", "(", ",", ".", "\u00a0", "\u2028",
          "\u200b", "\x01", "Ω", "ﬁ", "ŉ", "İstanbul", "CamelCase", "snake_case", "a.b",
          "  lead", "trail  ", "\r\n", "{\"json\": 1}", "[1, 2]", "&<>", "Ⅷ", "١٢"]


def rand_text(rng, n=None):
    n = rng.choice([0, 1, 2, 3, 5, 8, 13]) if n is None else n
    return "".join(rng.choice(PIECES) for _ in range(n))


def rand_float(rng, big=True):
    scales = [-8, -5, -2, 0, 0, 0, 3, 12, 17, 25] if big else [-8, -5, -2, 0, 0, 0, 3, 12]
    x = rng.uniform(-1000, 1000) * 10 ** rng.choice(scales)
    return x + 0.5 if x == int(x) else x  # an integral float would read back as an int


def rand_value(rng, depth=0, big=True):
    """A JSON value; big=False keeps floats within int64 (|int| of them must not overflow:
    moevm's integers are 64-bit, Python's unbounded)."""
    kinds = ["none", "bool", "int", "float", "str", "str", "list", "dict"]
    k = rng.choice(kinds if depth < 3 else kinds[:6])
    if k == "none":
        return None
    if k == "bool":
        return rng.random() < 0.5
    if k == "int":
        return rng.choice([0, 1, -1, 2, 3, 7, 10, 42, -17, 10 ** 12, -(2 ** 40)])
    if k == "float":
        return rand_float(rng, big)
    if k == "str":
        return rand_text(rng)
    if k == "list":
        return [rand_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rand_text(rng, rng.randrange(1, 3)) or "k": rand_value(rng, depth + 1)
            for _ in range(rng.randrange(4))}


def rand_schema(rng, depth=0):
    t = rng.choice(["string", "integer", "number", "boolean", "array", "object", "string"])
    s = {"type": t}
    if rng.random() < 0.5:
        s["description"] = rand_text(rng, 3)
    if t == "string" and rng.random() < 0.3:
        s["enum"] = [rand_text(rng, 1) for _ in range(rng.randrange(1, 4))]
    if t == "array" and depth < 2:
        s["items"] = rand_schema(rng, depth + 1)
    if t == "object" and depth < 2:
        s["properties"] = {f"p{i}": rand_schema(rng, depth + 1) for i in range(rng.randrange(3))}
        s["required"] = [p for p in s["properties"] if rng.random() < 0.5]
    if t == "integer" and rng.random() < 0.3:
        s["default"] = rng.randrange(10)
    return s


def rand_tools(rng):
    tools = []
    for i in range(rng.randrange(1, 4)):
        params = {"type": "object",
                  "properties": {f"arg_{j}": rand_schema(rng) for j in range(rng.randrange(4))}}
        params["required"] = [p for p in params["properties"] if rng.random() < 0.5]
        tools.append({"type": "function",
                      "function": {"name": f"tool_{i}_{rng.choice(['get', 'run', 'find'])}",
                                   "description": rand_text(rng, 4), "parameters": params}})
    return tools


def rand_args(rng):
    return {f"arg_{j}": rand_value(rng, 1) for j in range(rng.randrange(4))}


def rand_message(rng, role):
    m = {"role": role}
    if rng.random() < 0.02 and role in ("user", "system"):
        m["content"] = [{"type": "text", "text": rand_text(rng)}]
    else:
        m["content"] = rand_text(rng)
    if role == "assistant":
        if rng.random() < 0.3:
            m["reasoning_content"] = rand_text(rng)
        if rng.random() < 0.3:
            calls = []
            for _ in range(rng.randrange(1, 3)):
                args = rand_args(rng)
                if rng.random() < 0.2:
                    args = json.dumps(args)
                calls.append({"type": "function",
                              "function": {"name": f"tool_0_{rng.choice(['get', 'run'])}",
                                           "arguments": args}})
            m["tool_calls"] = calls
            if rng.random() < 0.3:
                m["content"] = ""
    if role == "tool" and rng.random() < 0.3:
        m["name"] = "tool_0_get"
    return m


def rand_conversation(rng):
    messages = []
    if rng.random() < 0.6:
        messages.append(rand_message(rng, "system"))
    n = rng.randrange(1, 9)
    if rng.random() < 0.4:  # well formed: user, assistant, ... (what Mixtral accepts)
        roles = ["user" if i % 2 == 0 else "assistant" for i in range(n)]
    else:
        roles = [rng.choice(["user", "user", "assistant", "assistant", "tool", "system"])
                 for _ in range(n)]
    messages += [rand_message(rng, r) for r in roles]
    v = {"messages": messages, "add_generation_prompt": rng.random() < 0.5,
         "bos_token": rng.choice(["<s>", "<|begin_of_text|>", "<｜begin▁of▁sentence｜>", ""]),
         "eos_token": rng.choice(["</s>", "<|endoftext|>", "<|im_end|>"])}
    if rng.random() < 0.4:
        v["tools"] = rand_tools(rng)
    r = rng.random()
    if r < 0.33:
        v["enable_thinking"] = True
    elif r < 0.66:
        v["enable_thinking"] = False
    if rng.random() < 0.2:
        v["reasoning_effort"] = rng.choice(["low", "high"])
    return v


# ---- (c) small templates: one per construct, over random inputs -------------------------------

def rstr(rng):
    return {"x": rand_text(rng), "y": rand_text(rng, rng.randrange(3)), "n": rng.randrange(-3, 6)}


def rnum(rng):
    pick = lambda: rng.choice([rng.randrange(-50, 50), rand_float(rng), rng.random() < 0.5])
    return {"a": pick(), "b": pick(), "p": rng.randrange(0, 4)}


def rval(rng):
    return {"x": rand_value(rng), "y": rand_value(rng)}


def rlist(rng):
    kind = rng.choice(["int", "str", "mixed", "dict"])
    if kind == "int":
        xs = [rng.randrange(-9, 20) for _ in range(rng.randrange(8))]
    elif kind == "str":
        xs = [rand_text(rng, rng.randrange(1, 3)) for _ in range(rng.randrange(8))]
    elif kind == "mixed":
        xs = [rand_value(rng, 2) for _ in range(rng.randrange(6))]
    else:
        xs = [{"name": rand_text(rng, 1), "n": rng.randrange(5), "ok": rng.random() < 0.5}
              for _ in range(rng.randrange(6))]
    return {"xs": xs, "d": {rand_text(rng, 1) or "k": rng.randrange(9) for _ in range(4)}}


FEATURES = [
    # output, whitespace control, comments, raw
    ("print", "{{ x }}|{{ y }}", rval),
    ("strip-tags", "a  {{- x -}}  b\n  {%- if y %} c {% endif -%}\n d {# note #}\n", rval),
    ("lstrip-trim", "l1\n    {% if x %}\n  yes\n    {% else %}\n  no\n    {% endif %}\nend\n", rval),
    ("lstrip-plus", "a\n  {%+ if true %}x{% endif +%}\nb\n  {# c #}\nd", rstr),
    ("raw", "{% raw %}{{ x }} {% if %}{% endraw %}{{ x }}", rstr),
    # statements
    ("if-elif", "{% if n > 2 %}big{% elif n > 0 %}small{% elif n == 0 %}zero{% else %}neg{% endif %}", rstr),
    ("for-loop", "{% for c in x %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                 "{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ c }}]{% endfor %}", rstr),
    ("for-items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% else %}none{% endfor %}", rlist),
    ("for-if", "{% for v in xs if v %}{{ loop.index }}:{{ v }},{% else %}empty{% endfor %}", rlist),
    ("for-prevnext", "{% for v in xs %}{{ loop.previtem }}<{{ v }}>{{ loop.nextitem }}|"
                     "{{ loop.cycle('a', 'b', 'c') }}{% endfor %}", rlist),
    ("break-continue", "{% for v in xs %}{% if loop.index == n %}{% break %}{% endif %}"
                       "{% if v is odd %}{% continue %}{% endif %}{{ v }}{% endfor %}",
     lambda r: dict(rlist(r), n=r.randrange(5))),
    ("scoping", "{% set s = 'out' %}{% for v in xs %}{% set s = v %}{% endfor %}{{ s }}"
                "{% set ns = namespace(last=none, count=0) %}{% for v in xs %}{% set ns.last = v %}"
                "{% set ns.count = ns.count + 1 %}{% endfor %}{{ ns.last }}/{{ ns.count }}", rlist),
    ("set-tuple-block", "{% set a, b = x, y %}{{ b }}{{ a }}{% set blk %}[{{ x }}]{% endset %}"
                        "{{ blk|length }}{% set up | upper %}{{ y }}{% endset %}{{ up }}", rstr),
    ("macro", "{% macro wrap(t, l='<', r='>') %}{{ l }}{{ t }}{{ r }}{% endmacro %}"
              "{{ wrap(x) }}{{ wrap(x, '[') }}{{ wrap(t=y, r=']') }}", rstr),
    ("macro-recursion", "{% macro show(v) %}{% if v is mapping %}{% for k, w in v|dictsort %}{{ k }}:"
                        "{{ show(w) }};{% endfor %}{% elif v is string %}'{{ v }}'"
                        "{% elif v is iterable %}[{% for w in v %}{{ show(w) }}{% endfor %}]"
                        "{% else %}{{ v }}{% endif %}{% endmacro %}{{ show(x) }}", rval),
    ("filter-block", "{% filter upper %}{{ x }}-{{ y }}{% endfilter %}|{% filter trim|title %} {{ x }} {% endfilter %}", rstr),
    ("generation", "{% generation %}{{ x }}{% set z = 1 %}{% endgeneration %}{{ z is defined }}", rstr),
    # expressions
    ("arith", "{{ a + b }}|{{ a - b }}|{{ a * b }}|{{ a / b }}|{{ a // b }}|{{ a % b }}|{{ -a }}|{{ +b }}", rnum),
    ("pow", "{{ a ** p }}|{{ p ** 2 ** 1 }}", rnum),
    ("compare", "{{ a == b }}{{ a != b }}{{ a < b }}{{ a <= b }}{{ a > b }}{{ a >= b }}", rnum),
    ("compare-any", "{{ x == y }}{{ x != y }}{{ x < y }}", rval),
    ("logic", "{{ x and y }}|{{ x or y }}|{{ not x }}|{{ x if y else 'no' }}|{{ x if y }}", rval),
    ("concat", "{{ x ~ y ~ 1 ~ none }}|{{ x + y }}", rval),
    ("in", "{{ y in x }}|{{ y not in x }}", rval),
    ("in-str", "{{ y in x }}{{ 'a' in x }}", rstr),
    ("subscript", "{{ x[n] }}|{{ x[-1] }}|{{ x[n:] }}|{{ x[:n] }}|{{ x[::2] }}|{{ x[::-1] }}|{{ x[n:1:-1] }}", rstr),
    ("list-subscript", "{{ xs[0] }}|{{ xs[-2:] }}|{{ xs[1::2] }}|{{ d.k }}|{{ d['k'] }}", rlist),
    ("literals", "{{ [x, 1, 2.5, none, true] }}{{ (x,) }}{{ {'k': x, 1: y} }}{{ 0x1f + 0o7 + 0b1 + 1_0 }}{{ 'a' \"b\" }}", rstr),
    ("repr", "{{ x }}||{{ [x] }}||{{ {'v': y} }}", rval),
    ("undefined", "{{ nothing }}|{{ nothing is defined }}|{{ nothing|default(x) }}|{{ nothing ~ x }}"
                  "|{% for v in nothing %}{{ v }}{% endfor %}|{{ nothing|length }}|{{ d.missing is undefined }}", rlist),
    ("undefined-error", "{{ nothing.attr }}", rstr),
    ("raise", "{% if n > 2 %}{{ raise_exception('too big: ' ~ n) }}{% endif %}ok", rstr),
    # tests
    ("tests-types", "{{ x is none }}{{ x is boolean }}{{ x is true }}{{ x is false }}{{ x is integer }}"
                    "{{ x is float }}{{ x is number }}{{ x is string }}{{ x is mapping }}"
                    "{{ x is iterable }}{{ x is sequence }}{{ x is defined }}{{ x is callable }}", rval),
    ("tests-values", "{{ a is odd }}{{ a is even }}{{ a is divisibleby 3 }}{{ a is eq b }}"
                     "{{ a is ne b }}{{ a is gt b }}{{ a is lt(b) }}{{ a is in [1, 2, b] }}", rnum),
    ("tests-str", "{{ x is lower }}{{ x is upper }}{{ x is escaped }}{{ (x|e) is escaped }}", rstr),
    # string filters and methods
    ("case", "{{ x|upper }}|{{ x|lower }}|{{ x|title }}|{{ x|capitalize }}|{{ x.upper() }}|"
             "{{ x.lower() }}|{{ x.title() }}|{{ x.capitalize() }}", rstr),
    ("trim", "{{ x|trim }}|{{ x|trim('ab') }}|{{ x.strip() }}|{{ x.lstrip() }}|{{ x.rstrip('\\n') }}|"
             "{{ x.strip(y) }}", rstr),
    ("split", "{{ x.split() }}|{{ x.split(' ') }}|{{ x.split(y or ',', 1) }}|{{ x.split('</think>')[-1] }}|"
              "{{ x.splitlines() }}", rstr),
    ("affix", "{{ x.startswith(y) }}{{ x.endswith(y) }}{{ x.startswith(('a', y)) }}{{ x.endswith('\\n') }}", rstr),
    ("find", "{{ x.find(y) }}|{{ x.rfind(y) }}|{{ x.count(y) }}|{{ x.find('a', n) }}", rstr),
    ("replace", "{{ x.replace(y, '#') }}|{{ x|replace(' ', '_') }}|{{ x.replace('a', 'b', 1) }}", rstr),
    ("join-method", "{{ y.join(x.split()) }}|{{ '-'.join(x) }}", rstr),
    ("length", "{{ x|length }}|{{ x|count }}|{{ x|wordcount }}|{{ x|list|length }}", rstr),
    ("indent", "{{ x|indent }}|{{ x|indent(2, true) }}|{{ x|indent('> ', blank=true) }}", rstr),
    ("escape", "{{ x|e }}|{{ x|escape|e }}|{{ x|safe }}|{{ (x|e) + '<' }}", rstr),
    ("string", "{{ x|string }}|{{ x|string|length }}", rval),
    ("center", "[{{ x|center(12) }}]", rstr),
    # numbers
    ("int-float", "{{ x|int }}|{{ x|float }}|{{ x|int(-1) }}|{{ y|float(0.5) }}",
     lambda r: {"x": rand_value(r, big=False), "y": rand_value(r, big=False)}),
    ("int-str", "{{ s|int }}|{{ s|float }}",
     lambda r: {"s": r.choice(["12", " 7 ", "-3", "1_000", "2.5", "1e3", "abc", "", "0x10", "inf", "nan",
                               "-0", "+4", "3.", ".5", "1__0"])}),
    ("round", "{{ a|round }}|{{ a|round(p) }}|{{ a|round(p, 'floor') }}|{{ a|round(1, 'ceil') }}|{{ a|abs }}", rnum),
    # sequences
    ("first-last", "{{ xs|first }}|{{ xs|last }}|{{ x|first }}|{{ x|last }}", lambda r: dict(rlist(r), x=rand_text(r))),
    ("join", "{{ xs|join }}|{{ xs|join(', ') }}|{{ xs|map('string')|join('/') }}", rlist),
    ("list-reverse", "{{ xs|list }}|{{ xs|reverse|list }}|{{ x|reverse }}|{{ d|list }}", lambda r: dict(rlist(r), x=rand_text(r))),
    ("sort", "{{ xs|sort }}|{{ xs|sort(reverse=true) }}|{{ xs|sort(case_sensitive=true) }}", rlist),
    ("sort-attr", "{{ xs|sort(attribute='n')|map(attribute='name')|list }}|{{ xs|sort(attribute='ok,n', reverse=true)|list }}", rlist),
    ("unique", "{{ xs|unique|list }}|{{ xs|unique(case_sensitive=true)|list }}", rlist),
    ("min-max-sum", "{{ xs|min }}|{{ xs|max }}|{{ xs|sum }}|{{ xs|max(attribute='n') }}", rlist),
    ("map", "{{ xs|map('upper')|list }}|{{ xs|map(attribute='name')|list }}|{{ xs|map(attribute='zz', default='-')|list }}", rlist),
    ("select", "{{ xs|select|list }}|{{ xs|select('odd')|list }}|{{ xs|reject('even')|list }}|"
               "{{ xs|select('string')|list }}|{{ xs|select('gt', 3)|list }}", rlist),
    ("selectattr", "{{ xs|selectattr('ok')|list }}|{{ xs|rejectattr('ok')|list }}|"
                   "{{ xs|selectattr('n', 'equalto', 2)|list|length }}|{{ xs|selectattr('name', 'defined')|first }}", rlist),
    ("generator", "{% set g = xs|select %}{{ g|list }}{{ g|list }}{% if xs|reject('defined') %}T{% endif %}", rlist),
    ("dict-methods", "{{ d.keys()|list }}|{{ d.values()|list }}|{{ d.items()|list }}|{{ d.get('k') }}|"
                     "{{ d.get('k', 0) }}|{{ d|items|list }}|{{ d|dictsort }}|{{ d|dictsort(by='value', reverse=true) }}", rlist),
    ("list-methods", "{{ xs.count(1) }}|{{ xs.index(xs[0]) if xs else '' }}", rlist),
    ("tojson", "{{ x|tojson }}|{{ x|tojson(indent=2) }}|{{ x|tojson(sort_keys=true) }}|"
               "{{ x|tojson(separators=(',', ':')) }}|{{ x|tojson(ensure_ascii=true) }}", rval),
    ("tojson-tools", "{{ tools|tojson(indent=4) }}", lambda r: {"tools": rand_tools(r)}),
    ("namespace-dict", "{% set ns = namespace(a=x, b=[]) %}{% set ns.b = ns.b + [y] %}{{ ns.a }}{{ ns.b }}"
                       "{{ dict(k=x)|tojson }}", rval),
    ("range", "{{ range(n)|list }}{{ range(1, n + 2, 2)|list }}{% for i in range(n) %}{{ i }}{% endfor %}", rstr),
]


# ---- (d) random layouts: text, whitespace and tags with whitespace control ---------------------

SPACE = ["", " ", "  ", "\t", "\n", "\n\n", " \n ", "\n  ", "\r\n", "\u3000", "x", "ab\n"]


def tag(rng, body, kind="%"):
    left = rng.choice(["", "", "-", "+"] if kind != "{" else ["", "", "-"])
    right = rng.choice(["", "", "-", "+"] if kind != "{" else ["", "", "-"])
    close = {"%": "%}", "{": "}}", "#": "#}"}[kind]
    return "{" + kind + left + rng.choice([" ", "", "  "]) + body + rng.choice([" ", ""]) + right + close


def rand_layout(rng, depth=0):
    out = []
    for _ in range(rng.randrange(1, 6)):
        out.append(rng.choice(SPACE))
        k = rng.randrange(7 if depth < 3 else 3)
        if k == 0:
            out.append(tag(rng, rng.choice(["x", "y ~ 'z'", "1"]), "{"))
        elif k == 1:
            out.append(tag(rng, rng.choice(["note", "", "a\nb"]), "#"))
        elif k == 2:
            out.append(rng.choice(SPACE) + "word" + rng.choice(SPACE))
        elif k == 3:
            out += [tag(rng, "if x"), rand_layout(rng, depth + 1), tag(rng, "else"),
                    rand_layout(rng, depth + 1), tag(rng, "endif")]
        elif k == 4:
            out += [tag(rng, "for i in range(2)"), rand_layout(rng, depth + 1), tag(rng, "endfor")]
        elif k == 5:
            out += [tag(rng, "raw"), rng.choice(SPACE) + "{{ raw }}" + rng.choice(SPACE),
                    tag(rng, "endraw")]
        else:
            out += [tag(rng, "set v"), rand_layout(rng, depth + 1), tag(rng, "endset"), "[",
                    tag(rng, "v", "{"), "]"]
    out.append(rng.choice(SPACE))
    return "".join(out)


def run_set(renderer, name, source, var_list, stats, show=3):
    for variables in var_list:
        same, want, got = renderer.compare(source, variables)
        if same:
            stats["pass"] += 1
            continue
        stats["fail"] += 1
        if stats["shown"].get(name, 0) < show:
            stats["shown"][name] = stats["shown"].get(name, 0) + 1
            print(f"FAIL {name}: variables {json.dumps(variables, ensure_ascii=False)[:400]}")
            if name == "layout":
                print(f"  template {source!r}")
            print(f"  jinja2 {'ok ' if want[0] else 'err'} {want[1][:600]!r}")
            print(f"  moevm  {'ok ' if got[0] else 'err'} {got[1][:600]!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--render", required=True, help="the jinja_render binary")
    ap.add_argument("--templates", required=True, help="the folder of *.jinja chat templates")
    ap.add_argument("--count", type=int, default=300, help="random conversations per template")
    ap.add_argument("--inputs", type=int, default=12, help="random inputs per small template")
    ap.add_argument("--layouts", type=int, default=300, help="random layouts of tags")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    templates = sorted(glob.glob(os.path.join(args.templates, "*.jinja")))
    if not templates:
        print(f"check_jinja: no templates in {args.templates}")
        print("0 passed, 1 failed")
        return 1
    stats = {"pass": 0, "fail": 0, "shown": {}}
    with tempfile.TemporaryDirectory() as work:
        renderer = Renderer(args.render, work)
        rng = random.Random(args.seed)
        conversations = [rand_conversation(rng) for _ in range(args.count)]
        for path in templates:
            with open(path, encoding="utf-8") as f:
                source = f.read()
            before = stats["fail"]
            ok_renders = sum(renderer.python(source, json.loads(json.dumps(c)))[0]
                             for c in conversations[:50])
            run_set(renderer, os.path.basename(path), source, conversations, stats)
            print(f"{'ok  ' if stats['fail'] == before else 'FAIL'} {os.path.basename(path)}: "
                  f"{len(conversations)} conversations ({ok_renders}/50 of the first render, "
                  f"the others raise)")
        before = stats["fail"]
        for _ in range(args.layouts):
            run_set(renderer, "layout", rand_layout(rng), [{"x": rng.random() < 0.5, "y": "Y"}],
                    stats, show=5)
        print(f"{'ok  ' if stats['fail'] == before else 'FAIL'} {args.layouts} random layouts")
        for name, source, gen in FEATURES:
            before = stats["fail"]
            run_set(renderer, name, source, [gen(rng) for _ in range(args.inputs)], stats)
            if stats["fail"] != before:
                print(f"FAIL feature {name}")
        print(f"ok   {len(FEATURES)} feature templates x {args.inputs} inputs"
              if not any(k for k in stats["shown"] if k in dict((f[0], 1) for f in FEATURES))
              else f"     {len(FEATURES)} feature templates x {args.inputs} inputs")
    print(f"{stats['pass']} passed, {stats['fail']} failed")
    return 0 if stats["fail"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
