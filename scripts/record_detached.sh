#!/usr/bin/env bash
# Long recordings on a GPU host reached through short calls (each call a few minutes, the host kept between
# calls only while calls follow one another): the recording runs detached from the call that starts it, later
# calls watch it, and each call packs what is recorded so far, so that a lost host loses nothing but the
# stages in flight (every polyvox pipeline resumes: complete stages are skipped, an interrupted one starts over).
#
#   scripts/record_detached.sh start NAME COMMAND...   run COMMAND detached (setsid), output in $TMP/NAME.log,
#                                                      its exit status in $TMP/NAME.exit; refused while NAME runs
#   scripts/record_detached.sh watch SECONDS NAME...   wait until every NAME has ended or SECONDS have passed;
#                                                      prints each one's last progress lines and the GPU's use
#   scripts/record_detached.sh pack DEST RUN_DIR [MiB] RUN_DIR as gzipped tar pieces of at most MiB (default 15)
#                                                      in DEST, leaving out TRL checkpoints and safetensors
#                                                      weights, except those a PACK_KEEP glob names ("a/*.safetensors
#                                                      b/*", relative to RUN_DIR): keep what a later stage reads
#   scripts/record_detached.sh unstick RUN_DIR SECONDS kill (SIGKILL, its process group) the holder of every stage
#                                                      folder's lock held now under RUN_DIR whose folder and log
#                                                      have not changed for SECONDS: a launcher without its own
#                                                      stall watch then sees that stage fail, runs the rest, and
#                                                      a later start resumes it ('watch' does this every pass
#                                                      when UNSTICK="RUN_DIR SECONDS" is set)
# TMP is the system's temp folder (${TMPDIR:-/tmp}). Exit status: start 0 when started; watch 0 when every NAME
# has ended with 0, 3 while one still runs, 1 when one failed.
set -u
tmp=${TMPDIR:-/tmp}
unstick() {  # RUN_DIR SECONDS
  local run=$1 secs=$2 lock folder pid pgid log newest now
  now=$(date +%s)
  while IFS= read -r lock; do
    folder=$(dirname "$lock"); pid=$(tr -dc 0-9 < "$lock")
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || continue
    # a lock file outlives its lock and names the last holder, often a launcher worker that lives on to run
    # other stages: act only on a lock that is held now (flock(1) cannot take it), never on its file alone
    flock -n -E 75 "$lock" true; [[ $? == 75 ]] || continue
    [[ $folder == "$run" ]] && continue  # the root: the launcher itself
    log="$run/launch/rank-0/$(realpath --relative-to="$run" "$folder" | sed 's#/#__#g').log"
    newest=$(find "$folder" "$log" -type f -printf '%T@\n' 2>/dev/null | sort -n | tail -1)
    newest=${newest%.*}
    if [[ -n $newest ]] && (( now - newest > secs )); then
      echo "unstick: $folder: nothing written for $((now - newest)) s; killing pid $pid's process group"
      pgid=$(awk '{print $5}' "/proc/$pid/stat" 2>/dev/null)  # /proc, not ps: a bare image may lack procps
      kill -9 -- "-${pgid:-$pid}" 2>/dev/null || kill -9 "$pid"
    fi
  done < <(find "$run" -name .lock -type f 2>/dev/null)
}
running() { [[ -f $tmp/$1.pid ]] && kill -0 "$(cat "$tmp/$1.pid")" 2>/dev/null; }
case "${1:-}" in
  start)
    name=${2:?name}; shift 2
    if running "$name"; then echo "$name: already running (pid $(cat "$tmp/$name.pid"))" >&2; exit 1; fi
    rm -f "$tmp/$name.exit"
    setsid bash -c '"$@"; echo $? > "'"$tmp/$name.exit"'"' _ "$@" >>"$tmp/$name.log" 2>&1 </dev/null &
    echo $! > "$tmp/$name.pid"
    echo "$name: started at $(date -u +%T) (pid $!)" ;;
  watch)
    secs=${2:?seconds}; shift 2; end=$((SECONDS + secs))
    while (( SECONDS < end )); do
      busy=0; for n in "$@"; do running "$n" && busy=1; done
      (( busy )) || break
      [[ -n ${UNSTICK:-} ]] && unstick $UNSTICK
      left=$((end - SECONDS)); (( left > 0 )) && sleep $(( left < 2 ? left : 2 ))
    done
    rc=0
    for n in "$@"; do
      echo "--- $n at $(date -u +%T)"; grep -v -E "it/s\]|s/it\]|sample/s|Warning|warn" "$tmp/$n.log" 2>/dev/null | tail -15
      if running "$n"; then rc=$(( rc == 1 ? 1 : 3 )); echo "$n: running"
      elif [[ -f $tmp/$n.exit ]]; then echo "$n: exit $(cat "$tmp/$n.exit")"; [[ $(cat "$tmp/$n.exit") == 0 ]] || rc=1
      else echo "$n: not started"; rc=1; fi
    done
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
    exit $rc ;;
  unstick) unstick "${2:?run dir}" "${3:?seconds}" ;;
  pack)
    dest=${2:?dest}; dir=${3:?run dir}; mib=${4:-15}
    mkdir -p "$dest"
    # every file but TRL checkpoints, locks and safetensors weights; weights matching a PACK_KEEP glob (relative
    # to RUN_DIR; * spans folders) are kept: the ones a later stage reads, so that a lost host can be resumed
    # split PACK_KEEP on spaces without pathname expansion: an unquoted `for g in $PACK_KEEP` turned '*' into the
    # names in the current folder, so PACK_KEEP='*' kept no weights (a collab recording came back without them)
    keep=(); read -r -a keep <<< "${PACK_KEEP:-}"
    (cd "$(dirname "$dir")" && base=$(basename "$dir") &&
     find "$base" -type f ! -path '*/checkpoint-*' ! -name .lock -print0 | while IFS= read -r -d '' f; do
       if [[ $f == *.safetensors ]]; then
         k=0; for g in "${keep[@]}"; do [[ ${f#"$base"/} == $g ]] && k=1; done; (( k )) || continue
       fi
       printf '%s\0' "$f"
     done | tar czf - --null -T -) | split -b "${mib}M" - "$dest/$(basename "$dir").tgz.part-"
    ls -la "$dest" ;;
  *) sed -n '2,26p' "$0" >&2; exit 2 ;;
esac
