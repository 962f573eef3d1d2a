// A running broker's quota sensors, read over JMX as an operator's JConsole would:
// kafka.server:type=Request,user=U,client-id=C (request-time: the thread time charged, as a
// percentage of one thread over the quota window; throttle-time: the mean throttle of the
// window's responses), or with TYPE Produce or Fetch their byte-rate. A sensor's tags are
// the entity level Kafka charged the client at. It attaches to the broker's JVM by process
// id (the JDK's Attach API starts the local management agent), so the broker needs no JMX
// port of its own.
// Run: java RequestQuotaMetrics.java PID INTERVAL_MS COUNT [TYPE]
// Prints COUNT snapshots, INTERVAL_MS apart, one line per sensor:
//   <millis since start> <user> <client-id> <request-time or byte-rate> <throttle-time>
// ("-" for an empty user or client-id), then "end" after each snapshot.
import com.sun.tools.attach.VirtualMachine;
import java.util.Set;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

public class RequestQuotaMetrics {
    public static void main(String[] args) throws Exception {
        long interval = Long.parseLong(args[1]);
        int count = Integer.parseInt(args[2]);
        String type = args.length > 3 ? args[3] : "Request";
        String rate = type.equals("Request") ? "request-time" : "byte-rate";
        VirtualMachine vm = VirtualMachine.attach(args[0]);
        String address = vm.startLocalManagementAgent();
        vm.detach();
        try (JMXConnector connector = JMXConnectorFactory.connect(new JMXServiceURL(address))) {
            MBeanServerConnection server = connector.getMBeanServerConnection();
            ObjectName pattern = new ObjectName("kafka.server:type=" + type + ",*");
            long start = System.currentTimeMillis();
            for (int i = 0; i < count; i++) {
                if (i > 0) Thread.sleep(interval);
                long at = System.currentTimeMillis() - start;
                Set<ObjectName> names = server.queryNames(pattern, null);
                StringBuilder out = new StringBuilder();
                for (ObjectName name : names) {
                    // Kafka's JmxReporter leaves an empty tag out of the name
                    String user = name.getKeyProperty("user");
                    String client = name.getKeyProperty("client-id");
                    if (user == null && client == null) continue;
                    Object requestTime = attribute(server, name, rate);
                    Object throttleTime = attribute(server, name, "throttle-time");
                    out.append(at).append(' ').append(user == null || user.isEmpty() ? "-" : user).append(' ')
                        .append(client == null || client.isEmpty() ? "-" : client).append(' ')
                        .append(requestTime).append(' ').append(throttleTime).append('\n');
                }
                out.append("end\n");
                System.out.print(out);
                System.out.flush();
            }
        }
    }

    private static Object attribute(MBeanServerConnection server, ObjectName name, String key) {
        try {
            return server.getAttribute(name, key);
        } catch (Exception e) {
            return "NaN";
        }
    }
}
