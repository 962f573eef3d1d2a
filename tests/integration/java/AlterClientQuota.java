// The Java Admin API altering one quota of one entity (Admin.alterClientQuotas), as an
// operator's program would: a key kafka-configs refuses before sending (KIP-936's
// producer_ids_rate) reaches the cluster, or the proxy in front of it, this way.
// Run: java -cp 'kafka-libs/*' AlterClientQuota.java BOOTSTRAP ENTITY_TYPE ENTITY_NAME KEY VALUE
// ENTITY_NAME "-" is the default entity; prints "altered" or the error and exits 1.
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;

public class AlterClientQuota {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        String name = args[2].equals("-") ? null : args[2];
        ClientQuotaEntity entity = new ClientQuotaEntity(java.util.Collections.singletonMap(args[1], name));
        ClientQuotaAlteration.Op op = new ClientQuotaAlteration.Op(args[3], Double.parseDouble(args[4]));
        try (Admin admin = Admin.create(props)) {
            admin.alterClientQuotas(List.of(new ClientQuotaAlteration(entity, List.of(op)))).all().get();
            System.out.println("altered");
        } catch (Exception e) {
            System.out.println("error " + e.getCause());
            System.exit(1);
        }
    }
}
