#!/usr/bin/env bash
# Holds the commit subjects since a recorded base to the project's rule: at most 72 characters, in the imperative
# ("Add", "Fix", "Move", not "Added", "Adds" or "Adding"), the detail in the body after one blank line. An optional
# "area: " prefix is allowed (the word after it is checked). Commits before the base predate the rule.
#   bash tools/check/commits.sh            checks BASE..HEAD (BASE: tools/check/commits_base)
#   bash tools/check/commits.sh REV        checks REV..HEAD
# Exits 1 naming each commit that breaks the rule; 2 when the base is not in this clone's history.
set -euo pipefail
cd "$(dirname "$0")/../.."
base=${1:-$(tr -d '[:space:]' <tools/check/commits_base)}
range="$base..HEAD"
if ! git cat-file -e "$base^{commit}" 2>/dev/null; then
  if [[ $(git rev-parse --is-shallow-repository) != true ]]; then
    echo "commit check: base $base is not in this repository's history" >&2
    exit 2
  fi
  # A shallow clone (CI systems often fetch one commit) holds only the newest commits: check HEAD, which came after
  # the base, and say that the rest was not seen.
  echo "commit check: a shallow clone without the base $base: checking HEAD alone (git fetch --unshallow for all)" >&2
  range="HEAD^!"
fi
# First words that end like a past tense or a gerund yet are imperatives.
allowed=" embed feed seed speed shed need exceed proceed succeed heed bring string ring ping "
bad=0
count=0
while IFS= read -r commit; do
  count=$((count + 1))
  subject=$(git log -1 --format=%s "$commit")
  second=$(git log -1 --format=%B "$commit" | sed -n 2p)
  problems=()
  ((${#subject} <= 72)) || problems+=("subject of ${#subject} characters (at most 72)")
  [[ -z "$second" ]] || problems+=("no blank line between the subject and the body")
  rest=$subject
  [[ "$rest" =~ ^[A-Za-z0-9_./+-]+:\ (.*)$ ]] && rest=${BASH_REMATCH[1]}  # "area: subject"
  word=$(awk '{print tolower($1)}' <<<"$rest")
  word=${word%%[^a-z]*}
  if [[ "$allowed" != *" $word "* ]]; then
    if [[ "$word" =~ (ed|ing)$ ]] || [[ "$word" =~ [^s]s$ && ! "$word" =~ (ss|us|is)$ ]]; then
      problems+=("'$word' is not the imperative (write 'Add', 'Fix', 'Move')")
    fi
  fi
  if ((${#problems[@]})); then
    bad=$((bad + 1))
    printf '%s %s\n' "$(git log -1 --format=%h "$commit")" "${subject:0:80}" >&2
    printf '    %s\n' "${problems[@]}" >&2
  fi
done < <(git rev-list --no-merges "$range" 2>/dev/null || git rev-list --no-merges --max-count=1 HEAD)
if ((bad)); then
  echo "commit check: $bad of $count commit(s) since $base break the subject rule (git commit --amend, or rebase -i)" >&2
  exit 1
fi
echo "commits: $count commit(s) since ${base:0:12} have imperative subjects of at most 72 characters"
