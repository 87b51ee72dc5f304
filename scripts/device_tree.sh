#!/usr/bin/env bash
# Prepare this checkout for device calls that run one commit's code and carry at most 64 MiB (tree + carried).
#
#   scripts/device_tree.sh prepare COMMIT [climbs|personas|personas-judge]
#                                           .rec/ <- COMMIT's lib/, configs/ and pyproject.toml (git archive), so
#                                           that a resumed recording runs the code its records name while the
#                                           checkout moves on; the recordings a world call does not read leave
#                                           the index (git rm --cached; listed in .git/info/exclude so that they
#                                           do not travel as untracked files); prints what a call will carry
#   scripts/device_tree.sh restore          puts them back in the index and the exclude list as they were:
#                                           run it before any commit (a commit made while prepared deletes them)
#
# A call then carries .rec (and .whl, the wheels the image lacks) and copies .rec's lib, configs and
# pyproject.toml over the tree's (scripts/record_h200.sh's header gives the whole procedure).
set -eu
cd "$(git rev-parse --show-toplevel)"
# what no device call reads (a world call reads data/models and data/runs/world/models/ alone; a collab or
# personas call trains its own models)
SLIM=(data/runs/personas-h200 data/runs/personas-h200-v3 data/runs/collab-h200 data/runs/collab-h200-ordered data/runs/collab-h200-ordered-v2
      data/runs/collab-h200-ordered-v3
      data/models/collab-h200 data/runs/world/seed-0 data/runs/world/seed-1 data/runs/world/seed-2 data/runs/world/seed-3
      data/runs/world/seed-4 data/runs/world/bands data/runs/world/bands-redraw data/runs/world/pilot
      data/runs/world/launch)
# a climbs call (record_h200.sh world-climbs) reads the matched run's models, pilot, bands and seed 0's RL
# adapters: the other recordings, and the run's other seeds, evaluations, climbs and launch logs, stay behind
CLIMBS_SLIM=(data/runs/personas-h200 data/runs/personas-h200-v3 data/runs/collab-h200 data/runs/collab-h200-ordered data/models/collab-h200
             data/runs/world/seed-1 data/runs/world/seed-2 data/runs/world/seed-3 data/runs/world/seed-4
             data/runs/world/seed-0/eval data/runs/world/seed-0/hillclimb-panel data/runs/world/seed-0/hillclimb-think
             data/runs/world/launch)
# a personas call (record_h200.sh personas-v2) reads data/models/tiny-chat alone
PERSONAS_SLIM=(data/runs/personas-h200 data/runs/personas-h200-v3 data/runs/collab-h200 data/runs/collab-h200-ordered data/models/collab-h200
               data/runs/world data/models/tiny-base data/models/tiny-think)
# a call for the judge model's verdicts on the shipped personas-h200-v3 (record_h200.sh personas-v3-judge) reads its
# systems, rubric verdicts and judge model: its generations, heads, sweep and mixes stay behind
PERSONAS_JUDGE_SLIM=(data/runs/personas-h200 data/runs/collab-h200 data/runs/collab-h200-ordered data/models/collab-h200
                     data/runs/world data/models/tiny-base data/models/tiny-think
                     data/runs/personas-h200-v3/gen data/runs/personas-h200-v3/heads
                     data/runs/personas-h200-v3/sweep data/runs/personas-h200-v3/mixes data/runs/personas-h200-v3/launch)
[[ ${3:-} == climbs ]] && SLIM=("${CLIMBS_SLIM[@]}")
[[ ${3:-} == personas-judge ]] && SLIM=("${PERSONAS_JUDGE_SLIM[@]}")
[[ ${3:-} == personas ]] && SLIM=("${PERSONAS_SLIM[@]}")
mark="# device_tree.sh prepare"
exclude=.git/info/exclude
case "${1:-}" in
  prepare)
    commit=$(git rev-parse --verify "${2:?commit}^{commit}")
    rm -rf .rec && mkdir .rec && git archive "$commit" lib configs pyproject.toml | tar x -C .rec
    echo "$commit" > .rec/COMMIT
    present=(); for p in "${SLIM[@]}"; do [[ -n $(git ls-files "$p" | head -1) ]] && present+=("$p"); done
    if (( ${#present[@]} )); then
      git rm -r -q --cached -- "${present[@]}"
      { echo "$mark"; for p in "${present[@]}"; do echo "/$p/"; done; } >> "$exclude"
    fi
    tracked=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
    untracked=$(git ls-files -z --others --exclude-standard | xargs -0 -r du -cb 2>/dev/null | tail -1 | cut -f1)
    rec=$(du -sb .rec | cut -f1); whl=$(du -sb .whl 2>/dev/null | cut -f1)
    total=$(( tracked + ${untracked:-0} + rec + ${whl:-0} ))
    awk -v t="$total" -v a="$tracked" -v u="${untracked:-0}" -v r="$rec" -v w="${whl:-0}" -v c="${commit:0:12}" \
      'BEGIN {printf "a call carries %.1f MB (tracked %.1f, untracked %.1f, .rec %.1f, .whl %.1f) of 67.1 MB; .rec = %s\n", t/1e6, a/1e6, u/1e6, r/1e6, w/1e6, c}'
    (( total < 64 * 1024 * 1024 )) || { echo "device_tree: over 64 MiB" >&2; exit 1; } ;;
  restore)
    git reset -q HEAD -- "${SLIM[@]}" "${CLIMBS_SLIM[@]}" "${PERSONAS_SLIM[@]}" "${PERSONAS_JUDGE_SLIM[@]}" 2>/dev/null || true
    if grep -q "^$mark" "$exclude" 2>/dev/null; then
      awk -v m="$mark" '$0 == m {skip = 1; next} skip && /^\// {next} {skip = 0; print}' "$exclude" > "$exclude.tmp"
      mv "$exclude.tmp" "$exclude"
    fi
    git status --short | head -5 ;;
  *) sed -n '2,13p' "$0" >&2; exit 2 ;;
esac
