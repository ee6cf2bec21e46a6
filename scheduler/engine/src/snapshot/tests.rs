use super::claim_gpus;

#[test]
fn a_bound_pod_keeps_the_gpus_it_names_when_they_are_valid() {
    let mut used = 0b0001;
    assert_eq!(claim_gpus(&mut used, 8, &[2, 3], 2), (0b1100, true));
    assert_eq!(used, 0b1101);
    // Taken, out of range, named twice or the wrong count: the lowest free ones instead.
    for named in [&[0, 4][..], &[4, 9], &[4, 4], &[4]] {
        let mut used = 0b0001;
        assert_eq!(
            claim_gpus(&mut used, 8, named, 2),
            (0b0110, false),
            "{named:?}"
        );
        assert_eq!(used, 0b0111);
    }
    // Fewer free GPUs than wanted: as many as there are.
    let mut used = 0b1110;
    assert_eq!(claim_gpus(&mut used, 4, &[], 3), (0b0001, false));
    // A pod that wants none claims none, whatever it names.
    assert_eq!(claim_gpus(&mut used, 4, &[1], 0), (0, true));
}
