#!/usr/bin/env bash
# speedgate's deadline on a hung GPU case, in a project with no ini file of its own: serially and under xdist -n 1.
# Usage: [PYTHON=...] bash tests/gpu/hang_case/run.sh [DEADLINE_S]   (needs torch, triton, pytest-xdist and this checkout's speedgate)
# Expect: serially the run ends at about DEADLINE_S with exit 1, naming tests/test_spin.py::test_spins and its stack;
# under -n 1 the worker is replaced, the crash report names the case with its stack, and test_after passes.
# An outer `timeout` (DEADLINE_S + 90 s) stops a run the deadline failed to end: exit 124 says so.
set -u
deadline="${1:-30}"
here="$(cd "$(dirname "$0")" && pwd)"
project="$(mktemp -d)"  # outside this repository: no pyproject.toml, tox.ini or conftest.py above the test
trap 'rm -rf "$project"' EXIT
cp "$here/spin_case.py" "$project/test_spin.py"
cd "$project"
status=0
for how in serial xdist; do
  args=(-p no:cacheprovider -p no:randomly --speedgate-deadline "$deadline" --hardware-key hang-check -rA)
  if [ "$how" = xdist ]; then args+=(-n 1); fi
  echo "=== $how: python -m pytest test_spin.py ${args[*]}"
  start=$(date +%s)
  timeout $((deadline + 90)) "${PYTHON:-python}" -m pytest test_spin.py "${args[@]}" > out.txt 2> err.txt
  code=$?
  took=$(( $(date +%s) - start ))
  cat out.txt; echo "--- stderr"; cat err.txt
  echo "=== $how: exit $code after ${took} s"
  named=$(cat out.txt err.txt | grep -c "speedgate: test_spin.py::test_spins ran past its deadline of ${deadline} s")
  stack=$(cat out.txt err.txt | grep -c 'test_spin.py", line [0-9]* in spin')
  if [ "$how" = serial ]; then
    ok=$([ "$code" = 1 ] && [ "$named" -ge 1 ] && [ "$stack" -ge 1 ] && echo yes || echo no)
  else
    after=$(grep -c "PASSED test_spin.py::test_after" out.txt)
    ok=$([ "$code" = 1 ] && [ "$named" -ge 1 ] && [ "$stack" -ge 1 ] && [ "$after" -ge 1 ] && echo yes || echo no)
  fi
  echo "=== $how: ended and named: $ok"
  [ "$ok" = yes ] || status=1
done
exit $status
