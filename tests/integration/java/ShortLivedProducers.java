// A user in a restart loop, as KIP-936 describes it: COUNT idempotent producers, each created,
// sending one record, waiting for it, and closed, THREADS at a time. Every producer gets a
// new producer id from the cluster. Prints "delivered N" and "failed <exception> N" lines.
//
// describe mode prints how many distinct producer ids the broker holds state for on the
// topic's partitions (Admin.describeProducers, the broker's own view).
//
// Run: java -cp 'kafka-libs/*' ShortLivedProducers.java produce BOOTSTRAP USER PASSWORD TOPIC
//          COUNT THREADS DELIVERY_TIMEOUT_MS
//      java -cp 'kafka-libs/*' ShortLivedProducers.java describe BOOTSTRAP TOPIC PARTITIONS
// USER "-" connects without SASL.
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeProducersResult.PartitionProducerState;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringSerializer;

public class ShortLivedProducers {
    public static void main(String[] args) throws Exception {
        if (args[0].equals("describe")) {
            describe(args[1], args[2], Integer.parseInt(args[3]));
        } else {
            produce(args[1], args[2], args[3], args[4], Integer.parseInt(args[5]),
                Integer.parseInt(args[6]), Integer.parseInt(args[7]));
        }
    }

    static void produce(String bootstrap, String user, String password, String topic, int count,
                        int threads, int deliveryTimeoutMs) throws Exception {
        AtomicInteger delivered = new AtomicInteger();
        Map<String, AtomicInteger> failed = new ConcurrentHashMap<>();
        Map<String, String> messages = new ConcurrentHashMap<>();
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        for (int i = 0; i < count; i++) {
            String key = Integer.toString(i);
            pool.submit(() -> {
                Properties props = new Properties();
                props.put("bootstrap.servers", bootstrap);
                props.put("client.id", "churn-" + key);
                props.put("enable.idempotence", "true");
                props.put("acks", "all");
                props.put("linger.ms", "0");
                props.put("buffer.memory", Integer.toString(1 << 20));
                props.put("request.timeout.ms", Integer.toString(deliveryTimeoutMs / 2));
                props.put("delivery.timeout.ms", Integer.toString(deliveryTimeoutMs));
                // connecting and authenticating queue behind the other threads on a busy
                // machine: only the delivery is timed, so a slow machine still reaches the quota
                props.put("max.block.ms", "120000");
                if (!user.equals("-")) {
                    props.put("security.protocol", "SASL_PLAINTEXT");
                    props.put("sasl.mechanism", "SCRAM-SHA-512");
                    props.put("sasl.jaas.config",
                        "org.apache.kafka.common.security.scram.ScramLoginModule required "
                        + "username=\"" + user + "\" password=\"" + password + "\";");
                }
                try (KafkaProducer<String, String> producer =
                         new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
                    producer.partitionsFor(topic);  // connected and authenticated first
                    producer.send(new ProducerRecord<>(topic, key, "record-" + key)).get();
                    delivered.incrementAndGet();
                    producer.close(Duration.ofSeconds(5));
                } catch (ExecutionException e) {
                    String kind = e.getCause().getClass().getSimpleName();
                    failed.computeIfAbsent(kind, k -> new AtomicInteger()).incrementAndGet();
                    messages.putIfAbsent(kind, String.valueOf(e.getCause().getMessage()));
                } catch (Exception e) {
                    String kind = e.getClass().getSimpleName();
                    failed.computeIfAbsent(kind, k -> new AtomicInteger()).incrementAndGet();
                    messages.putIfAbsent(kind, String.valueOf(e.getMessage()));
                }
            });
        }
        pool.shutdown();
        if (!pool.awaitTermination(10, TimeUnit.MINUTES)) {
            throw new IllegalStateException("producers still running after 10 minutes");
        }
        System.out.println("delivered " + delivered.get());
        for (Map.Entry<String, AtomicInteger> entry : new TreeMap<>(failed).entrySet()) {
            System.out.println("failed " + entry.getKey() + " " + entry.getValue().get()
                + " (" + messages.get(entry.getKey()) + ")");
        }
    }

    static void describe(String bootstrap, String topic, int partitions) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        List<TopicPartition> asked = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            asked.add(new TopicPartition(topic, p));
        }
        try (Admin admin = Admin.create(props)) {
            Map<TopicPartition, PartitionProducerState> states =
                admin.describeProducers(asked).all().get();
            Set<Long> ids = new java.util.HashSet<>();
            for (PartitionProducerState state : states.values()) {
                for (ProducerState producer : state.activeProducers()) {
                    ids.add(producer.producerId());
                }
            }
            System.out.println("producers " + ids.size());
        }
    }
}
