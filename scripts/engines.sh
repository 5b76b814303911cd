# Sourced by servers.sh: the JVM engines the tests run for real, from Maven Central. Their jars
# are resolved once into target/engines/ (versions pinned in scripts/engines/*.pom.xml), each
# runs from a directory of its own under the servers' directory, on free loopback ports, and
# stop_engines (called by stop_servers) stops them whatever happens.

KAFKA_VERSION=4.4.0
CASSANDRA_VERSION=5.0.9
kafka_pid=""
cassandra_pid=""

stop_engines() {
  local pid
  for pid in $kafka_pid $cassandra_pid; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}

# engines_tls: once per run, a CA (ENGINES_CA, PEM) and a certificate of it for 127.0.0.1, in a
# PEM key store both engines read: the private key (PKCS#8, unencrypted), then the certificate
# (ENGINES_KEYSTORE).
engines_tls() {
  [ -n "${ENGINES_CA:-}" ] && return 0
  need_deb openssl openssl
  local dir="$servers_dir/tls"
  mkdir -p "$dir"
  (
    cd "$dir"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=vigil-test-engines-ca \
      -keyout ca.key -out ca.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server.key \
      -out server.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >san.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
      -extfile san.ext -out server.pem 2>/dev/null
    openssl pkcs8 -topk8 -nocrypt -in server.key -out server.p8
    cat server.p8 server.pem >keystore.pem
  )
  ENGINES_CA="$dir/ca.pem"
  ENGINES_KEYSTORE="$dir/keystore.pem"
}

# resolve_jars POM DIR: the runtime jars of POM's one dependency, copied into DIR once.
resolve_jars() {
  local pom=$1 dir=$2
  [ -f "$dir/.resolved" ] && return 0
  need_deb java openjdk-17-jre-headless
  need_deb mvn maven
  echo "resolving $(basename "$pom" .pom.xml)'s jars from Maven Central into $dir"
  mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$PWD/$dir" >"$servers_dir/maven.log" 2>&1 || {
    echo "Maven could not resolve $pom:"
    tail -30 "$servers_dir/maven.log"
    exit 1
  }
  touch "$dir/.resolved"
}

# wait_for_port PORT SECONDS: whether something listens on 127.0.0.1:PORT within SECONDS.
wait_for_port() {
  local port=$1 seconds=$2
  for _ in $(seq 1 $((seconds * 4))); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    sleep 0.25
  done
  return 1
}

# start_kafka: an Apache Kafka broker (KRaft, one node that is its own controller) with three
# listeners, and the URLs Vigil's log takes for each:
# - KAFKA_URL, plaintext;
# - KAFKA_TLS_URL, TLS with a certificate of the run's CA (KAFKA_CA, a PEM file);
# - KAFKA_SCRAM_URL, SASL/SCRAM-SHA-256 over TLS, as user `vigil` (KAFKA_SCRAM_PASSWORD).
# Fails loudly, with the broker's log, if it does not answer.
start_kafka() {
  local libs="target/engines/kafka-$KAFKA_VERSION"
  resolve_jars scripts/engines/kafka.pom.xml "$libs"
  engines_tls
  local dir="$servers_dir/kafka"
  mkdir -p "$dir"
  local plain tls scram controller
  plain=$(free_port)
  tls=$(free_port)
  scram=$(free_port)
  controller=$(free_port)
  KAFKA_CA="$ENGINES_CA"
  KAFKA_SCRAM_PASSWORD="scram-$(free_port)-$RANDOM"

  cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://127.0.0.1:$plain,SSL://127.0.0.1:$tls,SASL_SSL://127.0.0.1:$scram,CONTROLLER://127.0.0.1:$controller
advertised.listeners=PLAINTEXT://127.0.0.1:$plain,SSL://127.0.0.1:$tls,SASL_SSL://127.0.0.1:$scram
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
ssl.keystore.type=PEM
ssl.keystore.location=$ENGINES_KEYSTORE
sasl.enabled.mechanisms=SCRAM-SHA-256
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
log.dirs=$dir/data
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
  local cluster_id
  cluster_id=$(python3 -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("="))')
  java -cp "$libs/*" kafka.tools.StorageTool format -t "$cluster_id" -c "$dir/server.properties" \
    --add-scram "SCRAM-SHA-256=[name=vigil,password=$KAFKA_SCRAM_PASSWORD]" >"$dir/format.log" 2>&1 || {
    echo "formatting the Kafka broker's storage failed:"
    cat "$dir/format.log"
    exit 1
  }
  # A small heap: the tests' topics are small, and the machine runs the whole suite beside it.
  java -Xms256m -Xmx768m -XX:+UseSerialGC -cp "$libs/*" kafka.Kafka "$dir/server.properties" \
    >"$dir/broker.log" 2>&1 &
  kafka_pid=$!
  if ! wait_for_port "$plain" 90 || ! wait_for_port "$scram" 10; then
    echo "the Kafka broker did not start:"
    tail -50 "$dir/broker.log"
    exit 1
  fi
  KAFKA_URL="kafka://127.0.0.1:$plain"
  KAFKA_TLS_URL="kafka://127.0.0.1:$tls?security.protocol=ssl&ssl.ca.location=$KAFKA_CA"
  KAFKA_SCRAM_URL="kafka://vigil:$KAFKA_SCRAM_PASSWORD@127.0.0.1:$scram?sasl.mechanism=SCRAM-SHA-256&ssl.ca.location=$KAFKA_CA"
}

# start_cassandra: an Apache Cassandra node, the tests' CQL server (ScyllaDB speaks the same
# protocol and dialect), on free ports, with a heap for a 2-core machine that runs the whole
# suite beside it. Its native port takes plaintext and TLS alike (a certificate of the run's
# CA). Sets CASSANDRA_URL (`scylla://host:port`, no keyspace) and CASSANDRA_CA; fails loudly,
# with the node's log, if the native port does not open.
start_cassandra() {
  local libs="target/engines/cassandra-$CASSANDRA_VERSION"
  resolve_jars scripts/engines/cassandra.pom.xml "$libs"
  engines_tls
  local dir="$servers_dir/cassandra"
  mkdir -p "$dir"
  local storage native
  storage=$(free_port)
  native=$(free_port)
  cat >"$dir/cassandra.yaml" <<EOF
cluster_name: vigil-test
num_tokens: 1
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "127.0.0.1:$storage"
listen_address: 127.0.0.1
rpc_address: 127.0.0.1
storage_port: $storage
native_transport_port: $native
start_native_transport: true
client_encryption_options:
  enabled: true
  optional: true
  ssl_context_factory:
    class_name: org.apache.cassandra.security.PEMBasedSslContextFactory
  keystore: $ENGINES_KEYSTORE
  require_client_auth: false
commitlog_sync: periodic
commitlog_sync_period: 10000ms
data_file_directories: [$dir/data]
commitlog_directory: $dir/commitlog
saved_caches_directory: $dir/saved_caches
hints_directory: $dir/hints
cdc_raw_directory: $dir/cdc
# The data is thrown away: no snapshots before a keyspace is dropped or truncated.
auto_snapshot: false
EOF
  # The module options Cassandra's own jvm17-server.options gives on Java 17.
  local modules=(
    --add-exports java.base/jdk.internal.misc=ALL-UNNAMED
    --add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED
    --add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED
    --add-exports java.rmi/sun.rmi.server=ALL-UNNAMED
    --add-exports java.sql/java.sql=ALL-UNNAMED
    --add-exports java.base/java.lang.ref=ALL-UNNAMED
    --add-exports jdk.unsupported/sun.misc=ALL-UNNAMED
    --add-exports jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED
    --add-exports jdk.attach/sun.tools.attach=ALL-UNNAMED
    --add-opens java.base/java.lang.module=ALL-UNNAMED
    --add-opens java.base/jdk.internal.loader=ALL-UNNAMED
    --add-opens java.base/jdk.internal.ref=ALL-UNNAMED
    --add-opens java.base/jdk.internal.reflect=ALL-UNNAMED
    --add-opens java.base/jdk.internal.math=ALL-UNNAMED
    --add-opens java.base/jdk.internal.module=ALL-UNNAMED
    --add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED
    --add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED
    --add-opens java.base/sun.nio.ch=ALL-UNNAMED
    --add-opens java.base/java.io=ALL-UNNAMED
    --add-opens java.base/java.lang.reflect=ALL-UNNAMED
    --add-opens jdk.compiler/com.sun.tools.javac=ALL-UNNAMED
    --add-opens java.base/java.lang=ALL-UNNAMED
    --add-opens java.base/java.util=ALL-UNNAMED
  )
  java -Xms1g -Xmx1g -Xss256k -XX:+UseG1GC -XX:MaxGCPauseMillis=300 "${modules[@]}" \
    -Djdk.attach.allowAttachSelf=true -Dio.netty.tryReflectionSetAccessible=true \
    -javaagent:"$libs/jamm-0.4.0.jar" \
    -Dcassandra.config="file://$dir/cassandra.yaml" -Dcassandra-foreground=yes \
    -Dcassandra.storagedir="$dir" -Dcassandra.skip_wait_for_gossip_to_settle=0 \
    -Dcassandra.ring_delay_ms=100 -Dcassandra.unsafesystem=true -Dlogback.configurationFile="$PWD/scripts/engines/cassandra-logback.xml" \
    -cp "$libs/*" org.apache.cassandra.service.CassandraDaemon >"$dir/node.log" 2>&1 &
  cassandra_pid=$!
  if ! wait_for_port "$native" 180; then
    echo "the Cassandra node did not start:"
    grep -E "ERROR|Exception" "$dir/node.log" | head -20
    tail -30 "$dir/node.log"
    exit 1
  fi
  CASSANDRA_URL="scylla://127.0.0.1:$native"
  CASSANDRA_CA="$ENGINES_CA"
}
