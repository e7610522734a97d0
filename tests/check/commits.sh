#!/usr/bin/env bash
# tools/check/commits.sh on a repository made here: a base, then commits whose subjects keep or break the rule. Each
# case must give the expected exit code and, when it fails, name the commit and the reason.
# usage: commits.sh SOURCE_DIR WORKDIR
set -euo pipefail
source_dir=$1 work=$2
rm -rf "$work" && mkdir -p "$work/tools/check" && cd "$work"
cp "$source_dir/tools/check/commits.sh" tools/check/
git init -q . && git config user.email t@example.org && git config user.name test
git add -A && git commit -q -m "Start" && git rev-parse HEAD > tools/check/commits_base
git add -A && git commit -q -m "Record the base"
failures=0
check() {  # EXPECTED_EXIT TEXT_IN_OUTPUT MESSAGE...
  local expected=$1 text=$2 status=0 output
  shift 2
  git commit -q --allow-empty "${@/#/-m}" 2>/dev/null || git commit -q --allow-empty -m "$1"
  output=$(bash tools/check/commits.sh 2>&1) || status=$?
  if [[ $status != "$expected" || "$output" != *"$text"* ]]; then
    echo "FAIL: '$1' gave exit $status (expected $expected, text '$text'): $output"
    failures=$((failures + 1))
  fi
  git reset -q --hard HEAD~1
}
check 0 "imperative subjects" "Add the command table"
check 0 "imperative subjects" "tools: Move the flags into tools/cli"
check 0 "imperative subjects" "Speed up the loader"
check 1 "'added' is not the imperative" "Added the command table"
check 1 "'adds' is not the imperative" "Adds the command table"
check 1 "'moving' is not the imperative" "cli: moving the flags"
check 1 "subject of 80 characters" "Add $(printf 'x%.0s' {1..76})"
check 1 "no blank line" $'Add a table\nwith its detail on the second line'
echo "$((8 - failures)) passed, $failures failed"
((failures == 0))
