#!/usr/bin/env bash
# Builds jobyard's Debian packages from this tree (release build, then dpkg-deb):
#   jobyard_<version>_<arch>.deb         the stripped binary, systemd units, /etc/jobyard,
#                                        man pages, shell completions, drop-in name symlinks
#   jobyard-dbgsym_<version>_<arch>.deb  the binary's debug information, split off by objcopy
#
#   scripts/build-deb.sh
#
# Environment: CARGO_TARGET_DIR (default target/); DEB_OUT_DIR (default
# $CARGO_TARGET_DIR/debian); DEB_VERSION (default <crate version>-1); DEB_MAINTAINER.
# Needs dpkg-dev (dpkg-shlibdeps) and binutils (objcopy, readelf); not root. The files the
# package holds besides the binary live in packaging/deb/ (docs/operations.md describes it).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
out_dir="${DEB_OUT_DIR:-$target_dir/debian}"
maintainer="${DEB_MAINTAINER:-jobyard developers <maintainers@jobyard.invalid>}"
arch="$(dpkg --print-architecture)"
# The packages' file dates: the last commit's, so two builds of one commit match. Only
# dpkg-deb sees it: build scripts that watch SOURCE_DATE_EPOCH would rebuild on each commit.
build_date="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}"

# Debug info stays on in the release profile (perf profiling); the package strips it.
build_binary() {
  cargo build --release -p jobyard
  bin="$target_dir/release/jobyard"
}

# dpkg-shlibdeps wants a source-package layout: packages are staged under work/debian/.
stage_dirs() {
  work="$out_dir/work"
  rm -rf "$work"
  pkg="$work/debian/jobyard"
  dbg="$work/debian/jobyard-dbgsym"
  mkdir -p "$pkg/DEBIAN" "$dbg/DEBIAN"
  : >"$work/debian/control"
}

# The binary without debug info, linked by build id and debuglink to the file that has it.
split_debug_info() {
  build_id="$(readelf -n "$bin" | awk '/Build ID:/ { print $3 }')"
  [[ -n "$build_id" ]] || { echo "build-deb: $bin has no build id" >&2; exit 1; }
  local debug_file="$dbg/usr/lib/debug/.build-id/${build_id:0:2}/${build_id:2}.debug"
  install -d "$(dirname "$debug_file")" "$pkg/usr/bin"
  objcopy --only-keep-debug --compress-debug-sections=zlib "$bin" "$debug_file"
  chmod 0644 "$debug_file"
  objcopy --strip-debug --strip-unneeded --remove-section=.comment \
    --add-gnu-debuglink="$debug_file" "$bin" "$pkg/usr/bin/jobyard"
  chmod 0755 "$pkg/usr/bin/jobyard"
}

# Symlinks outside PATH: Debian's beanstalkd and gearman-job-server own /usr/bin/beanstalkd
# and /usr/sbin/gearmand, and the binary picks its personality from the name it runs as.
install_dropin_names() {
  install -d "$pkg/usr/lib/jobyard/bin"
  for name in beanstalkd gearmand jobd jobd-master jobctl; do
    ln -s ../../../bin/jobyard "$pkg/usr/lib/jobyard/bin/$name"
  done
}

install_units_and_config() {
  install -D -m 0644 packaging/deb/jobyard.service "$pkg/lib/systemd/system/jobyard.service"
  install -D -m 0644 packaging/deb/jobyard.socket "$pkg/lib/systemd/system/jobyard.socket"
  install -D -m 0644 packaging/deb/jobyard.toml "$pkg/etc/jobyard/jobyard.toml"
  echo /etc/jobyard/jobyard.toml >"$pkg/DEBIAN/conffiles"
  install -m 0755 packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm "$pkg/DEBIAN/"
}

# Man pages and completions come from the binary's own clap command (hidden subcommand).
install_generated_docs() {
  local generated="$work/generated"
  "$pkg/usr/bin/jobyard" package-files "$generated"
  install -d "$pkg/usr/share/man/man1"
  for page in "$generated"/man/*.1; do
    gzip -9n <"$page" >"$pkg/usr/share/man/man1/$(basename "$page").gz"
  done
  install -D -m 0644 "$generated/completions/jobyard.bash" \
    "$pkg/usr/share/bash-completion/completions/jobyard"
  install -D -m 0644 "$generated/completions/_jobyard" \
    "$pkg/usr/share/zsh/vendor-completions/_jobyard"
  install -D -m 0644 "$generated/completions/jobyard.fish" \
    "$pkg/usr/share/fish/vendor_completions.d/jobyard.fish"
}

install_package_docs() {
  local doc_dir
  for doc_dir in "$pkg/usr/share/doc/jobyard" "$dbg/usr/share/doc/jobyard-dbgsym"; do
    install -D -m 0644 packaging/deb/copyright "$doc_dir/copyright"
  done
  for doc in README.md docs/*.md; do
    gzip -9n <"$doc" >"$pkg/usr/share/doc/jobyard/$(basename "$doc").gz"
  done
}

# control fields: the version, the libraries the binary links (dpkg-shlibdeps), the size.
write_control() {
  local root="$1" template="$2" shlibs="$3"
  local size
  size="$(du -sk --exclude=DEBIAN "$root" | cut -f1)"
  sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@MAINTAINER@|$maintainer|" \
    -e "s|@INSTALLED_SIZE@|$size|" -e "s|@SHLIBS@|$shlibs|" -e "s|@BUILD_ID@|$build_id|" \
    "$template" >"$root/DEBIAN/control"
  (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
    xargs -0 md5sum) >"$root/DEBIAN/md5sums"
}

shared_library_depends() {
  (cd "$work" && dpkg-shlibdeps -O -e debian/jobyard/usr/bin/jobyard) |
    sed -n 's/^shlibs:Depends=//p'
}

build_packages() {
  write_control "$pkg" packaging/deb/control "$(shared_library_depends)"
  write_control "$dbg" packaging/deb/control-dbgsym ""
  mkdir -p "$out_dir"
  SOURCE_DATE_EPOCH="$build_date" dpkg-deb --root-owner-group --build "$pkg" \
    "$out_dir/jobyard_${version}_${arch}.deb"
  SOURCE_DATE_EPOCH="$build_date" dpkg-deb --root-owner-group --build "$dbg" \
    "$out_dir/jobyard-dbgsym_${version}_${arch}.deb"
}

build_binary
version="${DEB_VERSION:-$("$bin" --version | awk '{ print $2 }')-1}"
stage_dirs
split_debug_info
install_dropin_names
install_units_and_config
install_generated_docs
install_package_docs
build_packages
rm -rf "$work"
ls -l "$out_dir"/*_"${version}"_"$arch".deb
