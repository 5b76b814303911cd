#!/usr/bin/env python3
"""Structure checks the test command runs before the lints (docs/architecture.md#conventions):

- no two sibling files of a crate import each other (a `use`, or a path naming the other's
  module); a module and its own children may share helpers both ways. Every crate's `src/` is
  read, the root package's (the `vigil` binary) included;
- no Rust or first-party JavaScript file (`.js`, `.mjs`; `node_modules` is not ours) is over
  1,500 lines, save the exceptions in `LONG_FILES`;
- no file cites a design document that is not in the repository;
- no comment or document names a repository path that does not exist: a backticked path in a
  comment (Rust, JavaScript, shell, Python, TOML, YAML, SQL, CQL) or in Markdown outside code
  blocks, a bare path in the same places that starts at a top-level entry and ends in a file
  extension, and a Markdown link to a file. `#anchor`, `:line` and `::item` suffixes are
  stripped. A path is the repository's when its first segment is a top-level entry (`docs/`,
  `tests/`, `Cargo.toml`, ...); it may be read from the repository root, the citing file's
  crate or the citing file's directory. A backticked relative path ending in a source
  extension (`pipeline/idle.rs`) must be the end of some file's path. URLs, routes (`/v1/...`),
  globs, placeholders (`<dir>`, `{id}`, `...`) and words of a backticked command other than
  paths are not read as paths.

Prints each finding and exits 1 if there is any."""

import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
MAX_LINES = 1500
SKIP_DIRS = {'target', '.git', 'node_modules'}
# Files allowed past MAX_LINES, each up to its own ceiling, and why.
LONG_FILES = {
    # The browser SDK is served as one file (`/sdk/v1/{version}/vigil.js`, no build step) and
    # each version's SHA-256 is pinned in ingest/sdk/RELEASES, so splitting it means a bundling
    # step and a new SDK version; until then it may not grow past this ceiling.
    os.path.join('ingest', 'sdk', 'vigil.js'): 2000,
}
# Citations of documents the repository does not have: the design notes' numbered decisions
# and style habits, the interface document's numbered rules, and the files they lived in.
FOREIGN_CITATION = re.compile(
    r'\(D\d{1,2}\b|\bD\d{1,2}(?:[,:)]|\s*[-–]\s*D\d)|\bSTYLE \d+|DESIGN\.md|STYLE\.md|DEPENDENCIES\.md|\.\./shared/'
    r'|(?i:\binterface\b[^.;()]{0,40}?\brules? \d|\brules? \d+(?:\s*[-–]\s*\d+)? of the interface'
    r'|interface\.md|spec/interface)')


def source_files(exts):
    """Files of the repository ending in one of `exts`; build output and `node_modules` are
    not read."""
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
    """The code of a Rust file without its comments and the text of its literals: raw strings
    (`r#"…"#`, which may hold quotes and `//`), character literals and strings are read in one
    left-to-right pass, so no quote inside one is taken for the start of another."""
    text = open(path, encoding='utf-8').read()
    token = re.compile(
        r'//[^\n]*'                      # a line comment
        r'|/\*.*?\*/'                    # a block comment
        r'|b?r(#*)".*?"\1'               # a raw string
        r"|b?'(?:\\.|[^\\'\n])'"          # a character literal, such as '"'
        r'|b?"(?:\\.|[^"\\])*"',           # a string
        re.S)
    return token.sub(lambda m: '' if m.group(0).startswith('/') else '""', text)


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


# Where a comment starts, by file extension; Markdown is read whole, outside code blocks.
COMMENT_START = {
    '.rs': r'(?:^|\s)//',
    '.js': r'(?:^|\s)//|^\s*/?\*',
    '.mjs': r'(?:^|\s)//|^\s*/?\*',
    '.sh': r'(?:^|\s)#',
    '.py': r'(?:^|\s)#',
    '.toml': r'(?:^|\s)#',
    '.yml': r'(?:^|\s)#',
    '.yaml': r'(?:^|\s)#',
    '.sql': r'--',
    '.cql': r'--',
}
# Relative paths in backticks with these endings name a file of the repository.
SOURCE_EXTS = ('.rs', '.md', '.js', '.mjs', '.py', '.sh', '.sql', '.cql')


def top_level():
    """The repository's top-level entries; those the root `.gitignore` names (build output, the
    development data directory) are not the repository's."""
    ignored = set(SKIP_DIRS)
    gitignore = os.path.join(ROOT, '.gitignore')
    if os.path.isfile(gitignore):
        for line in open(gitignore, encoding='utf-8'):
            match = re.fullmatch(r'/([\w.-]+)/?', line.strip())
            if match:
                ignored.add(match.group(1))
    return {name for name in os.listdir(ROOT) if name not in ignored}


def prose(path):
    """Each line of `path` that is a comment or Markdown prose, with its number: the comment part
    of a code line, a Python docstring's lines, a Markdown line outside a fenced block."""
    ext = os.path.splitext(path)[1]
    start = COMMENT_START.get(ext)
    if ext != '.md' and start is None:
        # A Dockerfile, or a script without an extension that starts with `#!`.
        if os.path.basename(path) != 'Dockerfile' and (ext or open(path, 'rb').read(2) != b'#!'):
            return
        start = COMMENT_START['.sh']
    lines = open(path, encoding='utf-8').read().split('\n')
    if ext == '.md':
        fenced = False
        for number, line in enumerate(lines, 1):
            if line.lstrip().startswith(('```', '~~~')):
                fenced = not fenced
            elif not fenced:
                yield number, line
        return
    docstring = False
    for number, line in enumerate(lines, 1):
        if ext == '.py' and (docstring or line.count('"""') % 2):
            if line.count('"""') % 2:
                docstring = not docstring
            yield number, line
            continue
        match = re.search(start, line)
        if match:
            yield number, line[match.start():]


def path_of(token, link=False):
    """`token` as a path, its `#anchor`, `:line` and `::item` suffixes stripped; None when it is
    no path: a URL, a route, a glob, a placeholder (`path/to/...`) or, but in a Markdown link, a
    word without a slash."""
    token = token.strip().rstrip('.,;')
    if re.search(r'[*?<>{}\[\]$=,;\'"()@|…]|\.\.\.|://|^/|^-|^~', token):
        return None
    token = re.sub(r'^\./', '', token)
    if token.startswith('path/to/'):
        return None
    token = re.sub(r'(?:#[\w.-]*|(?::\d+)+(?:-\d+)?|::\w.*)$', '', token)
    if ('/' not in token and not link) or not re.fullmatch(r'(?:\.\./)*[\w.-]+(?:/[\w.-]+)*/?', token):
        return None
    return token


def crate_of(path):
    """The directory of the crate (or the root package) `path` belongs to."""
    here = os.path.dirname(path)
    while os.path.normpath(here) != os.path.normpath(ROOT):
        if os.path.isfile(os.path.join(here, 'Cargo.toml')):
            return here
        here = os.path.dirname(here)
    return ROOT


def stale_paths(top):
    """`path:line: ...` for each path cited in a comment or document that does not exist."""
    tops = '|'.join(re.escape(name) for name in sorted(top, key=len, reverse=True))
    bare = re.compile(r'(?<![\w/.@:~$-])((?:%s)/[\w./#:-]*)' % tops)
    ends_in_extension = re.compile(r'\.[A-Za-z]\w*(?:#[\w.-]*|(?::\d+)+)?$')
    everything = list(source_files(('',)))
    for path in everything:
        bases = [ROOT, crate_of(path), os.path.dirname(path)]
        for number, line in prose(path):
            outside = re.sub(r'`[^`]*`', ' ', line)
            # (token, whether it is a whole backticked span, whether it is a Markdown link)
            tokens = [(word, len(span.split()) == 1, False)
                      for span in re.findall(r'`([^`]+)`', line) for word in span.split()]
            tokens += [(token, False, False)
                       for token in (m.rstrip('.:') for m in bare.findall(outside))
                       if ends_in_extension.search(token)]
            if path.endswith('.md'):
                tokens += [(m, False, True) for m in re.findall(r'\]\(([^)\s]+)\)', outside)
                           if not re.match(r'[\w+.-]+:|#', m)]
            for token, whole, link in tokens:
                target = path_of(token, link)
                if target is None:
                    continue
                first = target.split('/')[0]
                if link or first == '..':
                    found = os.path.exists(os.path.join(os.path.dirname(path), target))
                elif first in top:
                    found = any(os.path.exists(os.path.join(base, target)) for base in bases)
                elif whole and target.endswith(SOURCE_EXTS):
                    suffix = os.sep + os.path.normpath(target)
                    found = any(f.endswith(suffix) for f in everything)
                else:
                    continue
                if not found:
                    yield (f'{os.path.relpath(path, ROOT)}:{number}: `{token}` names a path '
                           'that is not in the repository')


def main():
    findings = []
    for crate in [''] + sorted(os.listdir(ROOT)):
        src = os.path.join(ROOT, crate, 'src')
        if os.path.isfile(os.path.join(ROOT, crate, 'Cargo.toml')) and os.path.isdir(src):
            for a, b in import_cycles(src):
                findings.append(f'{os.path.relpath(a, ROOT)} and {os.path.relpath(b, ROOT)} '
                                'import each other')
    for path in source_files(('.rs', '.js', '.mjs')):
        lines = sum(1 for _ in open(path, encoding='utf-8'))
        limit = LONG_FILES.get(os.path.relpath(path, ROOT), MAX_LINES)
        if lines > limit:
            findings.append(f'{os.path.relpath(path, ROOT)} has {lines} lines (at most {limit})')
    exts = ('.rs', '.js', '.mjs', '.sh', '.sql', '.cql', '.md', '.py', '.toml', '.yml', '.yaml')
    for path in source_files(exts):
        for number, line in enumerate(open(path, encoding='utf-8'), 1):
            if FOREIGN_CITATION.search(line) and not path.endswith('check-structure.py'):
                findings.append(f'{os.path.relpath(path, ROOT)}:{number} cites a document that '
                                f'is not in the repository: {line.strip()[:100]}')
    findings += stale_paths(top_level())
    for finding in findings:
        print(finding)
    print(f'structure: {len(findings)} finding(s)')
    return 1 if findings else 0


if __name__ == '__main__':
    sys.exit(main())
