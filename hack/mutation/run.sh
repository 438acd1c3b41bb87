#!/usr/bin/env bash
# make mutation: gremlins over the pure packages, one at a time, each judged
# by its own tests only, failing when a package's test efficacy (killed /
# killed + lived) is under MUTATION_EFFICACY or its mutant coverage under
# MUTATION_MCOVER. docs/mutation.md says what each package's run leaves out
# and why, and lists the mutants that cannot change behaviour.
#
#   MUTATION_PACKAGES  packages to run (default: all six below)
#   MUTATION_DIFF      a commit: only packages whose Go files changed since
#                      it, and only mutants on the changed lines (CI)
#   MUTATION_WORKERS   gremlins workers (default 1)
#   MUTATION_OUT       where the reports go (default bin/mutation)
#   MUTATION_FLAGS     more gremlins flags (--dry-run: count mutants only)
#   MUTATION_BUDGET    seconds for the whole run (default: none); a package
#                      not finished in time is reported as not judged and
#                      does not fail the run (CI keeps within its time)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

GREMLINS=${GREMLINS:-bin/gremlins}
ALL="plan internal/promptfit internal/assembler internal/tokens internal/consolidation internal/serve"
PACKAGES=${MUTATION_PACKAGES:-$ALL}
WORKERS=${MUTATION_WORKERS:-1}
EFFICACY=${MUTATION_EFFICACY:-90}
MCOVER=${MUTATION_MCOVER:-85}
OUT=${MUTATION_OUT:-bin/mutation}
mkdir -p "$OUT"

# Per package: extra `go test` flags and files left out (regexps on the
# path relative to the package, as gremlins matches them), each explained
# in docs/mutation.md.
# envtest_tests: the tests of a package that start the control plane
# (they call apiServer), as a regexp alternation, found rather than listed
# so that a new one is never left in by mistake.
envtest_tests() {
  awk '/^func Test/ { name = $2; sub(/\(.*/, "", name) } /apiServer\(t\)/ { print name }' "$1"/*_test.go | sort -u | paste -sd'|'
}
test_flags() {
  case $1 in
    internal/tokens) echo "-count=1 -short" ;;  # -short: the 1 MiB differential runs shrink
    *) echo "-count=1" ;;
  esac
}
excludes() {
  case $1 in
    internal/tokens) echo "^unicode_tables\.go$ ^corpus/" ;;
    internal/consolidation) echo "^(sqlstore|llm)/ ^(engine|run|batch|attempt|apply|retention|outbound|lexical|semantic|vector|prompt|recall|types)\.go$" ;;
  esac
}

# equivalents PKG LOG: for each mutant of PKG in $EQUIVALENT that gremlins'
# LOG reports, "equivalent" (lived, and its line is as listed), "changed"
# (lived, its line is not) or "killed", a tab, and the entry.
EQUIVALENT=${MUTATION_EQUIVALENT:-hack/mutation/equivalent.txt}
equivalents() {
  awk -F'\t' -v pkg="$1" -v logf="$2" '
    function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
    /^#/ || NF < 4 { next }
    $1 == pkg { want[$2 " " $3] = trim($4) }
    END {
      while ((getline line < logf) > 0) {
        if (!match(line, /^ *(LIVED|KILLED) [A-Z_]+ at [^ ]+$/)) continue
        split(trim(line), f, " ")  # status, mutator, "at", file:line:col
        key = f[4] " " f[2]
        if (!(key in want)) continue
        if (f[1] == "KILLED") { print "killed\t" pkg " " key; continue }
        split(f[4], pos, ":")
        path = pkg "/" pos[1]; code = ""
        for (n = 1; n <= pos[2] && (getline src < path) > 0; n++) code = src
        close(path)
        print (trim(code) == want[key] ? "equivalent" : "changed") "\t" pkg " " key
      }
    }' "$EQUIVALENT"
}

# The tests that start a control plane run only for the mutants the other
# tests miss (hack/mutation/go).
slow_tests() {
  case $1 in
    internal/serve) echo "^($(envtest_tests internal/serve))$" ;;
  esac
}

# The control plane's binaries from this checkout, not from gremlins' copy.
export KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS:-$PWD/bin/k8s}
export MUTATION_REAL_GO=${MUTATION_REAL_GO:-$(command -v go)}
export MUTATION_REAL_GIT=${MUTATION_REAL_GIT:-$(command -v git)}
export PATH="$PWD/hack/mutation:$PATH"
# hack/mutation/go completes the coverage profile with it (docs/mutation.md).
go build -o "$OUT/casecover" ./hack/mutation/casecover
MUTATION_CASECOVER=$(cd "$OUT" && pwd)/casecover
export MUTATION_CASECOVER

diff_args=()
if [[ -n ${MUTATION_DIFF:-} ]]; then
  changed=$(git diff --name-only "$MUTATION_DIFF" -- '*.go' | grep -v '_test\.go$' || true)
  keep=""
  for p in $PACKAGES; do
    if grep -q "^$p/[^/]*\.go$" <<<"$changed"; then keep="$keep $p"; fi
  done
  PACKAGES=$keep
  diff_args=(--diff "$MUTATION_DIFF")
  echo "mutation: packages changed since $MUTATION_DIFF:${PACKAGES:- none}"
fi

failed=""
budget=${MUTATION_BUDGET:-0}
for p in $PACKAGES; do
  limit=()
  if (( budget > 0 )); then
    left=$((budget - SECONDS))
    if (( left < 60 )); then echo "mutation: out of time, $p not judged"; continue; fi
    limit=(timeout "$left")
  fi
  name=${p//\//-}
  ex=()
  for e in $(excludes "$p"); do ex+=(--exclude-files "$e"); done
  echo "== mutation $p"
  start=$SECONDS
  rc=0
  MUTATION_PKG=$p MUTATION_TEST_FLAGS=$(test_flags "$p") MUTATION_SLOW_TESTS=$(slow_tests "$p") \
    "${limit[@]}" "$GREMLINS" unleash --workers "$WORKERS" --timeout-coefficient 10 \
    "${ex[@]}" "${diff_args[@]}" ${MUTATION_FLAGS:-} -o "$OUT/$name.json" "./$p" >"$OUT/$name.log" 2>&1 || rc=$?
  if (( rc == 124 )); then echo "mutation: out of time, $p not judged ($((SECONDS - start)) s)"; continue; fi
  if (( rc != 0 )); then echo "gremlins failed on $p:"; tail -20 "$OUT/$name.log"; failed="$failed $p"; continue; fi
  grep -E '^ *(LIVED|TIMED OUT|NOT COVERED)' "$OUT/$name.log" || true
  # gremlins' own thresholds fail at equality and on a diff with no mutant;
  # this check passes both.
  read -r k l nc <<<"$(sed -n 's/.*Killed: \([0-9]*\), Lived: \([0-9]*\), Not covered: \([0-9]*\).*/\1 \2 \3/p' "$OUT/$name.log" | tail -1)"
  to=$(sed -n 's/.*Timed out: \([0-9]*\).*/\1/p' "$OUT/$name.log" | tail -1)
  k=${k:-0} l=${l:-0} nc=${nc:-0} to=${to:-0}
  # Lived mutants listed in $EQUIVALENT (each with the line it mutates, as
  # it is, and why it cannot change behaviour) are equivalent: they leave
  # the efficacy's denominator. A listed mutant whose line has changed
  # since counts as lived until it is looked at again; one the tests kill
  # fails the package (the list says something untrue).
  eq=0
  while IFS=$'\t' read -r kind what; do
    case $kind in
      equivalent) eq=$((eq + 1)) ;;
      changed) echo "  listed as equivalent, but the line has changed (counted as lived): $what" ;;
      killed) echo "  listed as equivalent, but killed (take it off $EQUIVALENT): $what"; failed="$failed $p" ;;
    esac
  done < <(equivalents "$p" "$OUT/$name.log")
  verdict=$(awk -v k="$k" -v l="$l" -v nc="$nc" -v eq="$eq" -v e="$EFFICACY" -v c="$MCOVER" 'BEGIN {
    if (k + l - eq == 0) { printf "no mutant ran: ok"; exit }
    raw = 100 * k / (k + l)  # as gremlins reports it
    eff = 100 * k / (k + l - eq); cov = 100 * (k + l) / (k + l + nc)
    printf "efficacy %.2f%% (want >= %s; gremlins, counting the %d listed equivalent as lived: %.2f%%), mutant coverage %.2f%% (want >= %s): %s", eff, e, eq, raw, cov, c, (eff >= e && cov >= c) ? "ok" : "FAIL" }')
  echo "$p: killed $k, lived $l ($eq of them equivalent, listed), not covered $nc, timed out $to; $verdict ($((SECONDS - start)) s)"
  [[ $verdict == *ok ]] || failed="$failed $p"
done
if [[ -n $failed ]]; then
  echo "mutation: under the thresholds:$failed"
  exit 1
fi
