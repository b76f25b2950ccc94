#!/usr/bin/env python3
"""Every relative link in the project's Markdown reaches a file, and every `#anchor` a heading
of that file (GitHub's slugs). Run by `make lint`; prints each broken link, exits 1 if any."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SKIP = ("node_modules", "target", ".tools", "fuzz/corpus", "envoy/k8s/crds")


def slug(heading):
    h = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return h.replace(" ", "-")


def prose(path):
    """The lines outside code fences."""
    fence = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence:
            yield line


def anchors(path):
    seen, out = {}, set()
    for line in prose(path):
        m = re.match(r"^#+ (.*)", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


def main():
    broken = []
    for md in sorted(ROOT.rglob("*.md")):
        rel = md.relative_to(ROOT).as_posix()
        if any(part in rel for part in SKIP):
            continue
        for line in prose(md):
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"^[a-z]+:", target):
                    continue
                file, _, anchor = target.partition("#")
                dest = (md.parent / file).resolve() if file else md
                if not dest.exists():
                    broken.append(f"{rel}: {target} (no such file)")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    broken.append(f"{rel}: {target} (no such heading)")
    for b in broken:
        print(b)
    sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()
