#!/usr/bin/env bash
# Checks the relative links of README.md and the user guide (docs/src/*.md): every
# linked file must exist and, for a link into a markdown file with #anchor, the target
# must have a heading with that anchor (mdBook's and GitHub's rule: lower case, spaces to
# '-', other punctuation dropped). Links inside fenced code blocks are ignored.
# Usage: docs/check_links.sh [FILE.md...]   (default: README.md docs/src/*.md)
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

files=("$@")
[ ${#files[@]} -eq 0 ] && files=(README.md docs/src/*.md)

# Prints one line per link: FILE<TAB>LINE<TAB>TARGET.
links() {
    awk -v f="$1" '
        /^[ \t]*```/ { fence = !fence; next }
        fence { next }
        {
            line = $0
            gsub(/`[^`]*`/, "", line)          # inline code is not a link
            while (match(line, /\]\([^) \t]+\)/)) {
                print f "\t" NR "\t" substr(line, RSTART + 2, RLENGTH - 3)
                line = substr(line, RSTART + RLENGTH)
            }
        }' "$1"
}

# Prints the anchors of a markdown file's headings.
anchors() {
    awk '
        /^[ \t]*```/ { fence = !fence; next }
        fence { next }
        /^#+ / {
            h = $0
            sub(/^#+ +/, "", h)
            h = tolower(h)
            gsub(/[^a-z0-9 _-]/, "", h)
            gsub(/ /, "-", h)
            print h
        }' "$1"
}

bad=0
for f in "${files[@]}"; do
    dir=$(dirname "$f")
    while IFS=$'\t' read -r file line target; do
        case "$target" in
            http://* | https://* | mailto:*) continue ;;
        esac
        path=${target%%#*}
        anchor=""
        [[ "$target" == *"#"* ]] && anchor=${target#*#}
        if [ -z "$path" ]; then
            resolved=$file
        else
            resolved="$dir/$path"
        fi
        if [ ! -e "$resolved" ]; then
            echo "$file:$line: missing file: $target"
            bad=$((bad + 1))
            continue
        fi
        if [ -n "$anchor" ] && [[ "$resolved" == *.md ]]; then
            # grep reads every anchor (no -q): quitting at the first match
            # would end awk by SIGPIPE, a failed pipeline under pipefail.
            if ! anchors "$resolved" | grep -xF -- "$anchor" > /dev/null; then
                echo "$file:$line: no heading for anchor: $target"
                bad=$((bad + 1))
            fi
        fi
    done < <(links "$f")
done

if [ "$bad" -gt 0 ]; then
    echo "$bad broken link(s)"
    exit 1
fi
echo "all links resolve (${#files[@]} files)"
