#!/usr/bin/env bash
# mutate.sh — run deliberate bugs against the tests, one at a time.
#
#   scripts/mutate.sh                      every mutation of scripts/mutations.txt
#   scripts/mutate.sh never-record-sent    only the named ones
#   MUTATIONS=path/to/list scripts/mutate.sh
#   MUTATE_TIMEOUT=10m scripts/mutate.sh   go test -timeout per mutation (default 10m)
#   MUTATE_KEEP=1 scripts/mutate.sh        keep the scratch copy
#
# Each mutation is applied, as exact string replacements, to a scratch copy
# of the repository (the files git tracks or would track, as they are in the
# working tree now), never to the working tree itself. Then the tests of its
# packages run (go test -race -count=1 -p 1, narrowed by its -run regexp,
# with NOTIFIER_TEST_MEASURES=all).
# A mutation is CAUGHT when they fail, SURVIVED when they pass. A mutation
# whose old string is not found exactly once, or whose code no longer
# builds, is an ERROR: fix the list. The exit status is non-zero unless every
# mutation is caught.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
list=${MUTATIONS:-$root/scripts/mutations.txt}
timeout=${MUTATE_TIMEOUT:-10m}
GO=${GO:-go}

[ -f "$list" ] || { echo "mutate: no mutation list at $list" >&2; exit 2; }

# --- parse the list into parallel arrays --------------------------------
names=() pkgs=() runs=() edits=() # edits[i]: records "file<US>old<US>new" joined by <RS>
US=$'\x1f' RS=$'\x1e'
cur=-1 file=""
pending_old="" have_old=0
lineno=0
flush_check() {
	if [ "$have_old" = 1 ]; then
		echo "mutate: $list: mutation ${names[$cur]}: 'old' without 'new'" >&2
		exit 2
	fi
}
while IFS= read -r line || [ -n "$line" ]; do
	lineno=$((lineno + 1))
	case "$line" in
	'#'* | '') continue ;;
	esac
	key=${line%%:*}
	val=${line#*: }
	[ "$key" != "$line" ] || { echo "mutate: $list:$lineno: not 'key: value': $line" >&2; exit 2; }
	case "$key" in
	name)
		flush_check
		cur=$((cur + 1))
		names[cur]=$val pkgs[cur]="" runs[cur]="" edits[cur]=""
		file=""
		;;
	file | old | new | pkgs | run)
		[ "$cur" -ge 0 ] || { echo "mutate: $list:$lineno: '$key' before any 'name'" >&2; exit 2; }
		case "$key" in
		file) flush_check; file=$val ;;
		old)
			[ -n "$file" ] || { echo "mutate: $list:$lineno: 'old' without 'file'" >&2; exit 2; }
			flush_check; pending_old=$val; have_old=1 ;;
		new)
			[ "$have_old" = 1 ] || { echo "mutate: $list:$lineno: 'new' without 'old'" >&2; exit 2; }
			edits[cur]+="$file$US$pending_old$US$val$RS"; have_old=0 ;;
		pkgs) pkgs[cur]=$val ;;
		run) runs[cur]=$val ;;
		esac
		;;
	*) echo "mutate: $list:$lineno: unknown key '$key'" >&2; exit 2 ;;
	esac
done <"$list"
flush_check
[ "$cur" -ge 0 ] || { echo "mutate: $list: no mutations" >&2; exit 2; }
for i in "${!names[@]}"; do
	[ -n "${edits[$i]}" ] || { echo "mutate: mutation ${names[$i]}: no file/old/new" >&2; exit 2; }
	[ -n "${pkgs[$i]}" ] || { echo "mutate: mutation ${names[$i]}: no pkgs" >&2; exit 2; }
done

# --- which to run ----------------------------------------------------------
selected=()
if [ $# -gt 0 ]; then
	for want in "$@"; do
		found=0
		for i in "${!names[@]}"; do
			if [ "${names[$i]}" = "$want" ]; then selected+=("$i"); found=1; fi
		done
		[ "$found" = 1 ] || { echo "mutate: no mutation named '$want' in $list" >&2; exit 2; }
	done
else
	selected=("${!names[@]}")
fi

# --- the scratch copy ------------------------------------------------------
scratch=$(mktemp -d "${TMPDIR:-/tmp}/notifier-mutate.XXXXXX")
cleanup() { if [ -z "${MUTATE_KEEP:-}" ]; then rm -rf "$scratch"; else echo "mutate: scratch copy kept at $scratch"; fi; }
trap cleanup EXIT
(cd "$root" && git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
	[ -e "$f" ] && printf '%s\0' "$f"
done | tar --null -T - -cf -) | tar -xf - -C "$scratch"
# The same module in another directory: -trimpath lets the build cache
# serve the packages a mutation does not touch.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath"
# dispatch's tests that measure run under -race too: one mutation at a time
# leaves the machine to them (make test runs them without -race instead).
export NOTIFIER_TEST_MEASURES=all
echo "mutate: scratch copy of $root at $scratch"

# apply FILE OLD NEW: replace the one occurrence of OLD in FILE (\n and \t
# escapes allowed), or fail loudly.
apply() {
	local f=$scratch/$1
	[ -f "$f" ] || { echo "mutate: $1: no such file" >&2; return 1; }
	OLD=$2 NEW=$3 FILE=$1 perl -0777 -i -pe '
		BEGIN { for my $v (\$ENV{OLD}, \$ENV{NEW}) { $$v =~ s/\\n/\n/g; $$v =~ s/\\t/\t/g; } $o = $ENV{OLD}; $n = $ENV{NEW}; }
		my $c = () = /\Q$o\E/g;
		if ($c != 1) { print STDERR "mutate: $ENV{FILE}: the old string occurs $c times (want exactly 1): $ENV{OLD}\n"; exit 3; }
		s/\Q$o\E/$n/;
	' "$f"
}

# --- run -------------------------------------------------------------------
results=() caught=0 total=0 errors=0
for i in "${selected[@]}"; do
	name=${names[$i]}
	total=$((total + 1))
	echo
	echo "=== mutation $name"
	files=()
	ok=1
	IFS=$RS read -r -d '' -a recs < <(printf '%s\0' "${edits[$i]}") || true
	for rec in "${recs[@]}"; do
		[ -n "$rec" ] || continue
		IFS=$US read -r f old new <<<"$rec"
		# back up each file once, before its first edit
		if [ ! -e "$scratch/$f.mutate-orig" ]; then cp "$scratch/$f" "$scratch/$f.mutate-orig"; files+=("$f"); fi
		if ! apply "$f" "$old" "$new"; then ok=0; break; fi
		echo "    $f: '$old' -> '$new'"
	done
	read -r -a pk <<<"${pkgs[$i]}"
	args=(-race -count=1 -p 1 -timeout "$timeout")
	[ -z "${runs[$i]}" ] || args+=(-run "${runs[$i]}")
	start=$SECONDS
	verdict=""
	if [ "$ok" = 0 ]; then
		verdict="ERROR (old string not found: fix scripts/mutations.txt)"
		errors=$((errors + 1))
	elif ! out=$(cd "$scratch" && $GO test -race -count=1 -run '^$' "${pk[@]}" 2>&1); then
		echo "$out" | tail -20
		verdict="ERROR (the mutated code does not build)"
		errors=$((errors + 1))
	else
		echo "    go test ${args[*]} ${pk[*]}"
		log=$scratch/.mutate-$name.log
		if (cd "$scratch" && $GO test "${args[@]}" "${pk[@]}") >"$log" 2>&1; then
			verdict="SURVIVED"
		else
			verdict="CAUGHT"
			caught=$((caught + 1))
		fi
		grep -E '^(--- FAIL|FAIL|ok|panic:)|_test\.go:[0-9]+:' "$log" | grep -v '^redis: ' | head -15 | sed 's/^/    /' || true
	fi
	for f in "${files[@]}"; do mv "$scratch/$f.mutate-orig" "$scratch/$f"; done
	took=$((SECONDS - start))
	echo "--- $name: $verdict (${took}s)"
	results+=("$(printf '%-30s %-10s %5ss  %s' "$name" "${verdict%% *}" "$took" "${pkgs[$i]}${runs[$i]:+ -run '${runs[$i]}'}")")
done

echo
echo "mutation                       verdict     time  tests"
printf '%s\n' "${results[@]}"
echo
if [ "$errors" -gt 0 ]; then
	echo "score: $caught/$total caught ($errors errors: mutations that no longer apply or build)"
else
	echo "score: $caught/$total caught"
fi
[ "$caught" = "$total" ]
