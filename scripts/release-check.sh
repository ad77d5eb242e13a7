#!/usr/bin/env bash
# The release build, proven: deploys every published module to a file repository in a temp dir (jars, sources,
# javadoc, poms), checks what is there, then THE ADOPTION TEST: a fresh Maven project that declares only the BOM and
# jccl-collectives (as README.md, "Use it from Maven", documents) builds offline against that file repository and
# runs a float all-reduce on 2 and 4 ranks (shm) and on 2 ranks over tcp0 on the class path, and on 2 ranks on the
# module path, with the documented JVM flags, checking every sum. Called by .ci/run after the tests; about a minute
# on 2 cores after a build (66 s on the shared 2-core VM).
# Usage: scripts/release-check.sh [-k] [extra Maven arguments for the deploy]
#   -k keeps the temp dir (its path is printed). MAVEN_REPO_LOCAL: the local repository (default ~/.m2/repository).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=scripts/env.sh
source scripts/env.sh

KEEP=0
if [ "${1:-}" = "-k" ]; then
  KEEP=1
  shift
fi
REPO_LOCAL="${MAVEN_REPO_LOCAL:-$HOME/.m2/repository}"
VERSION=$(sed -n 's|^  <version>\(.*\)</version>|\1|p' pom.xml | head -n 1)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/jccl-release-check.XXXXXX")
cleanup() {
  if [ "$KEEP" = 1 ]; then
    echo "release-check: kept $WORK"
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
fail() {
  echo "release-check: FAILED: $*" >&2
  exit 1
}
started=$(date +%s)

# 1. The release build. The deploy plugin (3.x) refuses offline mode outright ("Cannot deploy artifacts when Maven
#    is in offline mode"), so this one step runs without -o; every plugin and dependency is a release version that
#    the build before it already fetched, and the target is a file: URL, so it downloads nothing a build has not.
RELEASE="$WORK/repository"
echo "release-check: deploying $VERSION to file:$RELEASE"
./mvnw -B -ntp -q -Dmaven.repo.local="$REPO_LOCAL" deploy -DskipTests \
  -DaltDeploymentRepository="release-check::file://$RELEASE" "$@"

# 2. What a release publishes: each library with its sources and javadoc, the parent and the BOM; no applications.
published=(jccl-common jccl-verbs jccl-transport-shm jccl-transport-tcp jccl-collectives jccl-micrometer)
for artifact in "${published[@]}"; do
  dir="$RELEASE/io/jccl/$artifact/$VERSION"
  for suffix in .pom .jar -sources.jar -javadoc.jar; do
    [ -s "$dir/$artifact-$VERSION$suffix" ] || fail "missing $artifact-$VERSION$suffix"
  done
  # The stable module name: the artifact name with its dashes as dots, io.jccl.transport.shm for jccl-transport-shm.
  module="io.jccl.${artifact#jccl-}"
  module="${module//-/.}"
  # The JDK's jar tool (no unzip needed) derives the name the module path will use from Automatic-Module-Name.
  description=$(jar --describe-module --file="$dir/$artifact-$VERSION.jar")
  grep -qx "$module@$VERSION automatic" <<<"$description" || fail "$artifact: not the module $module: $description"
  listing=$(jar tf "$dir/$artifact-$VERSION.jar")
  grep -qx 'META-INF/LICENSE' <<<"$listing" && grep -qx 'META-INF/NOTICE' <<<"$listing" \
    || fail "$artifact: the jar carries no META-INF/LICENSE and NOTICE"
  listing=$(jar tf "$dir/$artifact-$VERSION-javadoc.jar")
  grep -qx 'index.html' <<<"$listing" || fail "$artifact: javadoc jar has no index.html"
done
conformance="$RELEASE/io/jccl/jccl-conformance/$VERSION/jccl-conformance-$VERSION"
for suffix in .pom .jar -tests.jar -test-sources.jar -test-javadoc.jar; do
  [ -s "$conformance$suffix" ] || fail "missing jccl-conformance-$VERSION$suffix (the provider conformance kit)"
done
for pom in jccl-parent jccl-bom; do
  [ -s "$RELEASE/io/jccl/$pom/$VERSION/$pom-$VERSION.pom" ] || fail "missing $pom-$VERSION.pom"
done
grep -q '<name>Apache-2.0</name>' "$RELEASE/io/jccl/jccl-parent/$VERSION/jccl-parent-$VERSION.pom" \
  || fail "the parent pom names no licence"
for unpublished in jccl-tools jccl-examples jccl-benchmarks; do
  [ ! -e "$RELEASE/io/jccl/$unpublished" ] || fail "$unpublished was deployed (maven.deploy.skip lost?)"
done
# The published jars on the module path: names resolve and no two modules share a package.
modules=()
for artifact in "${published[@]}"; do
  modules+=("$RELEASE/io/jccl/$artifact/$VERSION/$artifact-$VERSION.jar")
done
validation=$(IFS=:; java --module-path "${modules[*]}" --validate-modules 2>&1) \
  || fail "module path: $validation"
echo "release-check: repository complete (${#published[@]} libraries + conformance kit, parent, BOM; module path valid)"

# 3. The adoption test. A fresh local repository without io.jccl (hard links, else symbolic links, into the usual
#    one for everything else: plugins, JUnit), so JCCL can come only from the file repository; resolver bookkeeping
#    files are copied, never shared, since Maven rewrites them in place.
APP_REPO="$WORK/app-m2"
if ! cp -al "$REPO_LOCAL" "$APP_REPO" 2>/dev/null; then
  rm -rf "$APP_REPO"
  cp -as "$(readlink -f "$REPO_LOCAL")" "$APP_REPO"
fi
rm -rf "$APP_REPO/io/jccl"
find "$APP_REPO" \( -name '_remote.repositories' -o -name '*.properties' -o -name 'maven-metadata*.xml' \) \
  \( -type f -o -type l \) -exec sh -c 'for f; do cp "$f" "$f.copy" && mv -f "$f.copy" "$f"; done' sh {} +
APP="$WORK/app"
mkdir -p "$APP/src/main/java/com/example"
# Plugin versions are the ones JCCL's own build uses, so that an offline build finds them in the local repository.
cat >"$APP/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 https://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>com.example</groupId>
  <artifactId>jccl-adoption</artifactId>
  <version>1.0</version>
  <properties>
    <maven.compiler.release>25</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <repositories>
    <!-- Only for this check: a release comes from Maven Central, which needs no entry. -->
    <repository>
      <id>jccl-release-check</id>
      <url>file://$RELEASE</url>
    </repository>
  </repositories>
  <dependencyManagement>
    <dependencies>
      <dependency>
        <groupId>io.jccl</groupId>
        <artifactId>jccl-bom</artifactId>
        <version>$VERSION</version>
        <type>pom</type>
        <scope>import</scope>
      </dependency>
    </dependencies>
  </dependencyManagement>
  <dependencies>
    <dependency>
      <groupId>io.jccl</groupId>
      <artifactId>jccl-collectives</artifactId>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-compiler-plugin</artifactId><version>3.14.1</version></plugin>
      <plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-resources-plugin</artifactId><version>3.3.1</version></plugin>
      <plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-surefire-plugin</artifactId><version>3.5.4</version></plugin>
      <plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-jar-plugin</artifactId><version>3.4.2</version></plugin>
      <plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-install-plugin</artifactId><version>3.1.3</version></plugin>
      <plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-clean-plugin</artifactId><version>3.4.0</version></plugin>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-dependency-plugin</artifactId>
        <version>3.8.1</version>
        <executions>
          <execution>
            <id>runtime-class-path</id>
            <phase>package</phase>
            <goals><goal>copy-dependencies</goal></goals>
            <configuration>
              <outputDirectory>\${project.build.directory}/lib</outputDirectory>
              <includeScope>runtime</includeScope>
            </configuration>
          </execution>
        </executions>
      </plugin>
    </plugins>
  </build>
</project>
EOF
cat >"$APP/src/main/java/com/example/AllReduceCheck.java" <<'EOF'
package com.example;

import io.jccl.collectives.Communicator;
import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/** One rank of the adoption test: float sum all-reduces of a few sizes, every element checked. */
public final class AllReduceCheck {
    public static void main(String[] args) {
        try (Communicator communicator = Communicator.fromEnvironment()) {
            int rank = communicator.rank();
            int size = communicator.size();
            long checked = 0;
            // A few elements (latency algorithms) up to 1 Mi floats (bandwidth algorithms, several chunks).
            for (int count : new int[] {1, 8, 1000, 65_536, 1 << 20}) {
                MemorySegment buffer = communicator.allocate(count * 4L);
                for (int i = 0; i < count; i++) {
                    buffer.setAtIndex(ValueLayout.JAVA_FLOAT, i, (rank + 1) * (i % 13 + 1));
                }
                communicator.allReduce(buffer, count, DataType.FLOAT32, ReduceOp.SUM);
                float ranks = size * (size + 1) / 2f; // sum of rank + 1 over the ranks: exact in float
                for (int i = 0; i < count; i++) {
                    float expected = ranks * (i % 13 + 1);
                    float actual = buffer.getAtIndex(ValueLayout.JAVA_FLOAT, i);
                    if (actual != expected) {
                        throw new AssertionError("rank " + rank + ", count " + count + ", element " + i + ": "
                            + actual + " instead of " + expected);
                    }
                }
                checked += count;
            }
            String peer = size > 1 ? communicator.transportOf((rank + 1) % size) : "none";
            System.out.println("ALLREDUCE OK rank " + rank + " of " + size + " over " + peer + ": " + checked
                + " sums checked");
        }
    }
}
EOF
echo "release-check: building the adoption project offline (BOM + jccl-collectives only)"
# Offline, with file: repositories allowed (the resolver blocks every remote repository offline by default).
# The project's .mvn/jvm.config does not reach a build outside the checkout; its flags quiet Maven's own JDK 25
# warnings there too.
(cd "$APP" && MAVEN_OPTS="$(cat "$ROOT/.mvn/jvm.config") ${MAVEN_OPTS:-}" \
  "$ROOT/mvnw" -B -ntp -q -o -Daether.offline.protocols=file -Dmaven.repo.local="$APP_REPO" package) \
  || fail "the adoption project does not build offline from the release repository"
for jar in jccl-collectives jccl-verbs jccl-common jccl-transport-shm jccl-transport-tcp; do
  [ -f "$APP/target/lib/$jar-$VERSION.jar" ] || fail "jccl-collectives did not bring $jar at run time"
done
[ -z "$(find "$APP/target/lib" -name 'junit*' -o -name 'picocli*')" ] || fail "test or tool libraries leaked in"

# The README's JVM flags, class path and module path. --illegal-native-access=deny (the default of future JDKs)
# makes a missing --enable-native-access fail here instead of warning.
CLASS_PATH_FLAGS=(--illegal-native-access=deny --enable-native-access=ALL-UNNAMED --add-modules jdk.incubator.vector
  -cp "$APP/target/jccl-adoption-1.0.jar:$APP/target/lib/*")
MODULE_PATH_FLAGS=(--illegal-native-access=deny
  --enable-native-access=io.jccl.common,io.jccl.verbs,io.jccl.transport.shm,io.jccl.transport.tcp,io.jccl.collectives
  --add-modules jdk.incubator.vector,io.jccl.collectives -p "$APP/target/lib" -cp "$APP/target/jccl-adoption-1.0.jar")

# runRanks N EXPECTED_TRANSPORT cp|mp [VAR=value ...]: N ranks on this host, on the class path or the module path,
# with the JCCL launcher variables as `jccl run` sets them; every rank must print its line with the expected
# transport.
runRanks() {
  local ranks=$1 transport=$2 path=$3
  shift 3
  local port log pids=() rank status=0 flags=("${CLASS_PATH_FLAGS[@]}")
  [ "$path" = mp ] && flags=("${MODULE_PATH_FLAGS[@]}")
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' \
         2>/dev/null || echo $((20000 + RANDOM % 20000)))
  log="$WORK/ranks-$ranks-$transport-$path"
  for ((rank = 0; rank < ranks; rank++)); do
    env JCCL_RANK=$rank JCCL_WORLD_SIZE="$ranks" JCCL_LOCAL_RANK=$rank JCCL_STORE_ADDR="127.0.0.1:$port" \
        JCCL_TIMEOUT=60s "$@" \
      timeout 120 java "${flags[@]}" com.example.AllReduceCheck >"$log.$rank" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || status=$?
  done
  for ((rank = 0; rank < ranks; rank++)); do
    if [ "$status" != 0 ] || ! grep -q "^ALLREDUCE OK rank $rank of $ranks over $transport" "$log.$rank"; then
      tail -n 30 "$log".* >&2
      fail "$ranks-rank all-reduce over $transport, $path (cp: class path, mp: module path), exit status $status"
    fi
  done
  grep -h '^ALLREDUCE OK' "$log".* | sed "s/^/release-check:   $path: /"
}
runRanks 2 shm0 cp
runRanks 4 shm0 cp
# The tcp provider, brought the same way: two ranks made to use it over loopback.
runRanks 2 tcp0 cp JCCL_TRANSPORT=tcp0 JCCL_SOCKET_IFNAME=lo
# The module path: automatic module names, providers found as services of automatic modules.
runRanks 2 shm0 mp
echo "release-check: OK in $(($(date +%s) - started)) s"
