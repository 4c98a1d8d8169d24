#!/usr/bin/env python3
"""Reference renderer for the chat template tests: Python's Jinja2 set up as
transformers sets it up (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, {% generation %}, raise_exception, strftime_now,
tojson = json.dumps(ensure_ascii=False)), with what llama-server does around
the template: "developer" -> "system", a leading system message merged into
the next message ("system\\nuser") when the template does not render a system
message, and the variables enable_thinking=True, date_string, datetime.

    python3 oracle.py            regenerate expected/ from cases.json and the
                                 "expected" fields of jinja_cases.json
    python3 oracle.py FILE.jinja render the default conversation (debugging)

Only needs jinja2 (3.x). The Go tests never run this; they read expected/.
"""

import datetime as dt
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))

PROBE_SYSTEM = "flowinfer probe: system prompt"
PROBE_USER = "flowinfer probe: first user turn"


class TemplateRaised(Exception):
    pass


class GenerationTracker(jinja2.ext.Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation"), [], [], body).set_lineno(lineno)

    def _generation(self, caller):
        return caller()


def compile_template(source, now):
    def raise_exception(message):
        raise TemplateRaised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[GenerationTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def render_raw(tpl, messages, bos, eos, add_generation_prompt, now, tools=None):
    extra = {"tools": tools} if tools else {}
    return tpl.render(
        messages=[dict(m) for m in messages],
        bos_token=bos, eos_token=eos, **extra,
        add_generation_prompt=add_generation_prompt,
        enable_thinking=True,
        date_string=now.strftime("%d %b %Y"),
        datetime=now.strftime("%b %d %Y"),
    )


def supports_system(tpl, bos, eos, now):
    msgs = [{"role": "system", "content": PROBE_SYSTEM}, {"role": "user", "content": PROBE_USER}]
    try:
        return PROBE_SYSTEM in render_raw(tpl, msgs, bos, eos, True, now)
    except Exception:
        return False


def render(source, messages, bos, eos, add_generation_prompt, now, tools=None):
    """Renders like llama-server: returns the prompt, or raises TemplateRaised."""
    tpl = compile_template(source, now)
    msgs = [dict(m) for m in messages]
    if "<|channel|>" not in source:
        for m in msgs:
            if m["role"] == "developer":
                m["role"] = "system"
    if not supports_system(tpl, bos, eos, now) and msgs and msgs[0]["role"] == "system":
        if len(msgs) > 1:
            msgs[1]["content"] = msgs[0]["content"] + "\n" + msgs[1]["content"]
        msgs = msgs[1:]
    return render_raw(tpl, msgs, bos, eos, add_generation_prompt, now, tools)


def update_tool_cases(now):
    """Fills tool_cases.json's expected outputs: conversations with tools,
    assistant tool_calls (arguments as dicts, as transformers passes them)
    and tool results, rendered through real templates."""
    path = os.path.join(HERE, "tool_cases.json")
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    for case in doc["cases"]:
        with open(os.path.join(HERE, case["file"]), encoding="utf-8") as f:
            src = f.read()
        conv = doc["conversations"][case["conversation"]]
        case.pop("expected", None)
        case.pop("raised", None)
        try:
            case["expected"] = render(src, conv["messages"], case["bos"], case["eos"], True, now, doc["tools"])
        except TemplateRaised as e:
            case["raised"] = str(e)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, ensure_ascii=False)
        f.write("\n")


def load_cases():
    with open(os.path.join(HERE, "cases.json"), encoding="utf-8") as f:
        return json.load(f)


def main():
    cases = load_cases()
    now = dt.datetime.fromisoformat(cases["now"])
    if len(sys.argv) > 1:
        with open(sys.argv[1], encoding="utf-8") as f:
            src = f.read()
        conv = cases["conversations"]["chat"]
        print(render(src, conv["messages"], "<s>", "</s>", conv["add_generation_prompt"], now), end="")
        return
    out_dir = os.path.join(HERE, "expected")
    for tmpl in cases["templates"]:
        with open(os.path.join(HERE, tmpl["file"]), encoding="utf-8") as f:
            src = f.read()
        stem = os.path.splitext(os.path.basename(tmpl["file"]))[0]
        os.makedirs(os.path.join(out_dir, stem), exist_ok=True)
        for name, conv in cases["conversations"].items():
            path = os.path.join(out_dir, stem, name + ".txt")
            try:
                text = render(src, conv["messages"], tmpl["bos"], tmpl["eos"], conv["add_generation_prompt"], now)
            except TemplateRaised as e:
                text = "RAISED: " + str(e)
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(text)


def update_jinja_cases(now):
    """Fills jinja_cases.json's expected outputs (raw render, no workarounds)."""
    path = os.path.join(HERE, "jinja_cases.json")
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    for case in doc["cases"]:
        case.pop("expected", None)
        case.pop("raised", None)
        try:
            tpl = compile_template(case["template"], now)
            case["expected"] = render_raw(tpl, doc["messages"], "<s>", "</s>", True, now)
        except TemplateRaised as e:
            case["raised"] = str(e)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
    if len(sys.argv) == 1:
        update_jinja_cases(dt.datetime.fromisoformat(load_cases()["now"]))
        update_tool_cases(dt.datetime.fromisoformat(load_cases()["now"]))
