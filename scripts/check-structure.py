#!/usr/bin/env python3
"""Structure checks the test command runs before the lints (docs/architecture.md#conventions):

- no two sibling files of a crate import each other (a `use`, or a path naming the other's
  module); a module and its own children may share helpers both ways;
- no Rust source file is over 1,500 lines;
- no file cites a design document that is not in the repository.

Prints each finding and exits 1 if there is any."""

import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
MAX_LINES = 1500
SKIP_DIRS = {'target', '.git', 'node_modules'}
# Citations of documents the repository does not have: the design notes' numbered decisions
# and style habits, and the files they lived in.
FOREIGN_CITATION = re.compile(
    r'\(D\d{1,2}\b|\bD\d{1,2}(?:[,:)]|\s*[-–]\s*D\d)|\bSTYLE \d+|DESIGN\.md|STYLE\.md|DEPENDENCIES\.md|\.\./shared/')


def source_files(exts):
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        for name in filenames:
            if name.endswith(exts):
                yield os.path.normpath(os.path.join(dirpath, name))


def modules(src):
    """Each module path of a crate's `src/` to its file."""
    found = {}
    for dirpath, _, filenames in os.walk(src):
        for name in filenames:
            if not name.endswith('.rs'):
                continue
            path = os.path.join(dirpath, name)
            parts = os.path.relpath(path, src)[:-3].split(os.sep)
            if parts[-1] in ('lib', 'main', 'mod'):
                parts = parts[:-1]
            found[tuple(parts)] = path
    return found


def code_of(path):
    text = open(path, encoding='utf-8').read()
    text = re.sub(r'//[^\n]*', '', text)
    text = re.sub(r'/\*.*?\*/', '', text, flags=re.S)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def flatten(path):
    """`super::{a, b::c}` as `super::a`, `super::b::c`."""
    match = re.match(r'^(.*?)::\{(.*)\}$', path, re.S)
    if not match:
        return [path]
    base, inner = match.groups()
    parts, depth, current = [], 0, ''
    for ch in inner:
        if ch == ',' and depth == 0:
            parts.append(current)
            current = ''
            continue
        depth += (ch == '{') - (ch == '}')
        current += ch
    parts.append(current)
    out = []
    for part in (p.strip() for p in parts):
        if part:
            out += flatten(base + '::' + part)
    return out


def import_cycles(crate_src):
    mods = modules(crate_src)
    edges = {}
    for module, path in mods.items():
        code = code_of(path)
        paths = re.findall(r'\b(?:crate|super|self)(?:::(?:\w+|\{[^;]*?\}))+', code)
        # Paths relative to the module: `child::item`.
        paths += ['self::' + m.group(1) for m in re.finditer(r'(?<![:\w])(\w+)::', code)
                  if module + (m.group(1),) in mods]
        for flat in (f for p in paths for f in flatten(p)):
            segments = [s.strip() for s in flat.split('::')]
            if segments[0] == 'crate':
                here, rest = [], segments[1:]
            elif segments[0] == 'self':
                here, rest = list(module), segments[1:]
            else:
                here, rest = list(module), segments
                while rest and rest[0] == 'super':
                    here, rest = here[:-1], rest[1:]
            for segment in rest:
                if tuple(here + [segment]) not in mods:
                    break
                here.append(segment)
            target = mods.get(tuple(here))
            if target and target != path:
                edges.setdefault(path, set()).add(target)
    parent = {path: mods.get(module[:-1]) for module, path in mods.items() if module}
    for a, targets in edges.items():
        for b in targets:
            if a < b and a in edges.get(b, ()) and parent.get(a) != b and parent.get(b) != a:
                yield a, b


def main():
    findings = []
    for crate in sorted(os.listdir(ROOT)):
        src = os.path.join(ROOT, crate, 'src')
        if os.path.isfile(os.path.join(ROOT, crate, 'Cargo.toml')) and os.path.isdir(src):
            for a, b in import_cycles(src):
                findings.append(f'{os.path.relpath(a, ROOT)} and {os.path.relpath(b, ROOT)} '
                                'import each other')
    for path in source_files(('.rs',)):
        lines = sum(1 for _ in open(path, encoding='utf-8'))
        if lines > MAX_LINES:
            findings.append(f'{os.path.relpath(path, ROOT)} has {lines} lines (at most {MAX_LINES})')
    exts = ('.rs', '.js', '.mjs', '.sh', '.sql', '.cql', '.md', '.py', '.toml', '.yml', '.yaml')
    for path in source_files(exts):
        for number, line in enumerate(open(path, encoding='utf-8'), 1):
            if FOREIGN_CITATION.search(line) and not path.endswith('check-structure.py'):
                findings.append(f'{os.path.relpath(path, ROOT)}:{number} cites a document that '
                                f'is not in the repository: {line.strip()[:100]}')
    for finding in findings:
        print(finding)
    print(f'structure: {len(findings)} finding(s)')
    return 1 if findings else 0


if __name__ == '__main__':
    sys.exit(main())
