#!/usr/bin/env bash
# Install the `qwen36` command (pyproject.toml's console script) so that the commands the stack
# outputs and the docs print (`qwen36 tunnel ...`, `qwen36 wake ...`) work as pasted, from any shell.
# Usage: scripts/install_cli.sh   (scripts/deploy.sh runs it before every pulumi up)
#   VENV            the project's venv, the one Pulumi runs the program in (default .venv)
#   QWEN36_BIN_DIR  where the command is linked (default ~/.local/bin)
#
# The command lives in the venv (an editable install: it runs this checkout's code with the venv's
# pinned packages), and the venv's bin/ is not on PATH, so it is linked from ~/.local/bin: the
# per-user directory for executables (XDG base directory spec; pip --user and pipx install there),
# on PATH by default in Debian's and Ubuntu's ~/.profile once it exists.
set -Eeuo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=${VENV:-.venv}
BIN_DIR=${QWEN36_BIN_DIR:-$HOME/.local/bin}
PYTHON=${PYTHON:-python3}
log() { printf '%s [install-cli] %s\n' "$(date -u +%H:%M:%S)" "$*"; }

if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
pip_install() { "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@"; }
pip_install -r requirements.txt
pip_install --no-deps --editable .

command_path="$(cd "$VENV/bin" && pwd)/qwen36"
[[ -x $command_path ]] || { log "error: the install left no $command_path"; exit 1; }
mkdir -p "$BIN_DIR"
ln -sfn "$command_path" "$BIN_DIR/qwen36"
log "qwen36 -> $command_path (linked from $BIN_DIR)"
case ":$PATH:" in
  *":$BIN_DIR:"*) ;;
  *) log "$BIN_DIR is not on your PATH: add  export PATH=\"$BIN_DIR:\$PATH\"  to your shell's profile" ;;
esac
