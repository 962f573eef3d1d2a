// The Java Admin client creating topics of 30 partitions each with its default options:
// a topic refused with THROTTLING_QUOTA_EXCEEDED is retried once its throttle has passed
// (CreateTopicsOptions.retryOnQuotaViolation, true by default).
// Run: java -cp 'kafka-libs/*' CreateTopicsWithRetry.java BOOTSTRAP CLIENT_ID TOPIC...
import java.util.Arrays;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;

public class CreateTopicsWithRetry {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("client.id", args[1]);
        List<NewTopic> topics = Arrays.stream(args, 2, args.length)
            .map(name -> new NewTopic(name, 30, (short) 1))
            .toList();
        try (Admin admin = Admin.create(props)) {
            long started = System.nanoTime();
            admin.createTopics(topics).all().get();
            System.out.println("created in " + (System.nanoTime() - started) / 1_000_000 + " ms");
        }
    }
}
