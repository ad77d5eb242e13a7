#!/usr/bin/env bash
# Finds a JDK 25 and exports JAVA_HOME for the build, the tests and the tools.
# Order: $JAVA_HOME if it is a JDK 25, else /usr/lib/jvm/*25*. Sourced by ./jccl, .ci/run and scripts/*.
jccl_find_jdk25() {
  local candidate version
  for candidate in "${JAVA_HOME:-}" /usr/lib/jvm/*25* /usr/lib/jvm/*-25-* /opt/*jdk*25*; do
    [ -n "$candidate" ] && [ -x "$candidate/bin/java" ] && [ -x "$candidate/bin/javac" ] || continue
    # The image's release file says the version without starting a JVM (that costs ~0.1-0.3 s on every ./jccl).
    if [ -f "$candidate/release" ]; then
      version=$(sed -n 's/^JAVA_VERSION="\([0-9]*\).*/\1/p' "$candidate/release")
      if [ "$version" = "25" ]; then
        echo "$candidate"
        return 0
      fi
      [ -n "$version" ] && continue
    fi
    version=$("$candidate/bin/java" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
    if [ "$version" = "25" ]; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

if ! JAVA_HOME=$(jccl_find_jdk25); then
  cat >&2 <<'MSG'
JCCL needs a JDK 25 and none was found (looked at $JAVA_HOME and /usr/lib/jvm/*25*).
Install one, for example:
  apt-get install openjdk-25-jdk          (Debian/Ubuntu with JDK 25 packages)
  or unpack Temurin 25 under /usr/lib/jvm/temurin-25-jdk-amd64
then run again, or point JAVA_HOME at it.
MSG
  return 1 2>/dev/null || exit 1
fi
export JAVA_HOME
export PATH="$JAVA_HOME/bin:$PATH"
