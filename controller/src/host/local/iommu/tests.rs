use super::*;

#[test]
fn options_and_warnings() {
    let o = cmdline_options("BOOT_IMAGE=/vmlinuz root=/dev/sda1 amd_iommu=on iommu=pt quiet");
    assert_eq!(o, vec!["amd_iommu=on", "iommu=pt"]);
    assert!(cmdline_warnings(&o)[0].contains("not a valid option"));
}

#[test]
fn faults_are_attributed_to_devices() {
    let mut st = IommuState::default();
    parse_log(
        "iommu: Default domain type: Translated\n\
         AMD-Vi: Event logged [IO_PAGE_FAULT device=0000:01:00.0 domain=0x000e address=0x7f000 flags=0x0020]\n\
         vfio-pci 0000:81:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0010 address=0x1000 flags=0x0000]\n\
         AMD-Vi: Event logged [IO_PAGE_FAULT device=01:00.0 domain=0x000e address=0x7f040 flags=0x0020]\n\
         DMAR: [DMA Read NO_PASID] Request device [11:00.0] fault addr 0x1000 [fault reason 0x06] PTE Read access is not set\n",
        &mut st,
    );
    assert_eq!(st.default_domain_type.as_deref(), Some("Translated"));
    assert_eq!(st.page_faults.get("0000:01:00.0"), Some(&2));
    assert_eq!(st.page_faults.get("0000:11:00.0"), Some(&1));
    assert_eq!(st.page_faults.get("0000:81:00.0"), Some(&1));
}
